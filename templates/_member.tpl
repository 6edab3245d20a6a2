{{/*
member.statefulset: the StatefulSet of a cache's members (MemberSet: the cache's name) or of one
shard's (MemberSet <name>-s<shard>, its pods and claims labelled with their shard). See
statefulset.yaml.
*/}}
{{- define "member.statefulset" -}}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .MemberSet | quote }}
spec:
  serviceName: {{ .Name | quote }}
  # spec.hibernate stops every member and keeps their volumes.
  replicas: {{ if .Spec.Hibernate }}0{{ else }}{{ .Spec.Replicas }}{{ end }}
  podManagementPolicy: Parallel
  updateStrategy:
    type: {{ if .Sharded }}RollingUpdate{{ else }}OnDelete{{ end }}
  selector:
    matchLabels:
      {{- toYaml .MemberSelector | nindent 6 }}
  # The volumes are the data, and they belong to the cache, not to this StatefulSet: deleting the
  # StatefulSet (any cascade) or a pod keeps them, and the pods made anew mount them again. The
  # operator gives each claim an owner reference to the ManagedCache, so the claims go with the
  # cache; a scale-down keeps them too (a scale-up finds its data again).
  persistentVolumeClaimRetentionPolicy:
    whenDeleted: Retain
    whenScaled: Retain
  template:
    metadata:
      labels:
        {{- toYaml .Labels | nindent 8 }}
        {{ .RoleLabel }}: {{ .RoleReplica }}
        {{ .ServerLabel }}: {{ .ServerValue | quote }}
        {{- if .Shard }}
        {{ .ShardLabel }}: {{ .Shard | quote }}
        {{- end }}
        {{- if .TLS.Enabled }}
        {{ .TLS.Label }}: "true"
        {{- end }}
      annotations:
        cache.example.com/config-checksum: {{ include "redis.conf" . | sha256sum }}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ include "grace" . }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 999
        runAsGroup: 999
        fsGroup: 999
        seccompProfile:
          type: RuntimeDefault
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- toYaml .MemberSelector | nindent 14 }}
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- toYaml .MemberSelector | nindent 14 }}
      {{- with .Restore }}
      # spec.restore: each member's volume is filled from the backup, its checksum and size
      # verified, before its server starts ("cache-operator restore"), as the snapshot dump.rdb;
      # once the restore completed the container does nothing. On the first member (the one
      # elected first) a missing, corrupt or truncated object fails it with the reason (its
      # termination message), so that the member never starts empty as if restored; any other
      # member then starts empty and syncs. The store's keys are optional: a member that does not
      # restore needs none. In a sharded cache only each shard's first member loads its shard's
      # object (RESTORE_ONLY): a member holding keys is a node that claims their slots.
      initContainers:
        - name: restore
          image: {{ $.OperatorImage | quote }}
          imagePullPolicy: IfNotPresent
          args: [restore]
          terminationMessagePolicy: FallbackToLogsOnError
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: RESTORE_MEMBER
              value: {{ .Member | quote }}
            {{- if .Only }}
            - name: RESTORE_ONLY
              value: "true"
            {{- end }}
            - name: DATA_DIR
              value: /data
            - name: OBJECT_KEY
              value: {{ .Path | quote }}
            - name: EXPECTED_SHA256
              value: {{ .Checksum | quote }}
            - name: EXPECTED_BYTES
              value: {{ .Bytes | quote }}
            - name: RESTORE_STATE
              valueFrom:
                configMapKeyRef:
                  name: {{ $.ConfigName | quote }}
                  key: {{ .StateKey }}
                  optional: true
            {{- with .Refused }}
            - name: RESTORE_REFUSED
              value: {{ . | quote }}
            {{- end }}
            {{- range $.StoreEnv }}
            - name: {{ .Name | quote }}
              valueFrom:
                secretKeyRef:
                  name: {{ $.Restore.StoreSecret | quote }}
                  key: {{ .Key }}
                  optional: true
            {{- end }}
          resources:
            requests:
              cpu: 100m
              memory: 64Mi
            limits:
              memory: 256Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: data
              mountPath: /data
      {{- end }}
      containers:
        - name: redis
          image: {{ .Image | quote }}
          imagePullPolicy: IfNotPresent
          command:
            - sh
            - -c
            - |
              set -eu
              conf=/tmp/redis.conf
              # Only hex goes into the configuration: hashes of the clients' passwords and the
              # internal password, each checked first, so no Secret value can add a line to it.
              hex() { case "$2" in "" | *[!0-9a-f]*) echo "the Secret's $1 is not hex; not starting" >&2; exit 1 ;; esac; }
              hex {{ .Keys.PasswordHash }} "$PASSWORD_SHA256"
              hex {{ .Keys.Internal }} "$INTERNAL_PASSWORD"
              passwords="#$PASSWORD_SHA256"
              if [ -n "${PREVIOUS_PASSWORD_SHA256:-}" ]; then
                hex {{ .Keys.PreviousHash }} "$PREVIOUS_PASSWORD_SHA256"
                passwords="$passwords #$PREVIOUS_PASSWORD_SHA256"
              fi
              internal=">$INTERNAL_PASSWORD"
              if [ -n "${PREVIOUS_INTERNAL_PASSWORD:-}" ]; then
                hex {{ .Keys.PreviousInternal }} "$PREVIOUS_INTERNAL_PASSWORD"
                internal="$internal >$PREVIOUS_INTERNAL_PASSWORD"
              fi
              # Each user's permissions, from the ConfigMap (users.acl in _helpers.tpl): one line
              # each, never none.
              rules() {
                r=$(printf '%s\n' "$REDIS_USERS" | sed -n "s/^$1 //p" | head -n 1)
                if [ -z "$r" ]; then echo "the ConfigMap's {{ .UsersConfigKey }} has no rules for the user $1; not starting" >&2; exit 1; fi
                printf '%s' "$r"
              }
              default_rules=$(rules default)
              internal_rules=$(rules {{ .Keys.InternalUser }})
              printf '%s\n' "$REDIS_CONFIG" "$REDIS_LIVE_CONFIG" > "$conf"
              printf 'user default on %s %s\n' "$passwords" "$default_rules" >> "$conf"
              printf 'user {{ .Keys.InternalUser }} on %s %s\n' "$internal" "$internal_rules" >> "$conf"
              printf 'masteruser {{ .Keys.InternalUser }}\nmasterauth %s\n' "$INTERNAL_PASSWORD" >> "$conf"
              {{- if .SnapshotFormat }}
              # Data in a newer snapshot format than this server reads (the header of the AOF's
              # base or of a snapshot: REDIS and four digits) was written before a version change
              # the data cannot survive. The webhook lets such a change through only when the
              # cache has the annotation cache.example.com/allow-data-loss: then the data is
              # discarded (the operator restarts every member at once and reports the loss);
              # without it the member does not start, and keeps the data.
              for f in /data/appendonlydir/*.base.rdb /data/dump.rdb; do
                [ -f "$f" ] || continue
                format=$(head -c 9 "$f" | tail -c 4)
                case "$format" in "" | *[!0-9]*) continue ;; esac
                if [ "$(expr "$format" + 0)" -gt {{ .SnapshotFormat }} ]; then
                  if [ "${DATA_LOSS_ALLOWED:-}" = true ]; then
                    echo "discarding the data on the volume: it is in snapshot format $format and {{ .ServerValue }} reads up to {{ .SnapshotFormat }}; the cache allows the loss (cache.example.com/allow-data-loss)" >&2
                    rm -rf /data/appendonlydir /data/dump.rdb
                    break
                  fi
                  echo "the data on the volume is in snapshot format $format and {{ .ServerValue }} reads up to {{ .SnapshotFormat }}; not starting (the data is kept; the annotation cache.example.com/allow-data-loss=true discards it)" >&2
                  exit 1
                fi
              done
              {{- end }}
              {{- if .Sharded }}
              # A member of a sharded cache is a node of its cluster: its identity (node ID), its
              # role and its view of the others are nodes.conf on its volume (cluster-config-file),
              # so that it comes back as the node it was, the primary of its slots or the replica
              # it was, whatever its address now: it announces its pod's (cluster-announce-ip), and
              # the others learn it through the cluster bus. The operator introduces new members,
              # gives the first primaries their slots and attaches the replicas to their shard's
              # primary (CLUSTER MEET, ADDSLOTSRANGE, REPLICATE); the cluster fails over by itself.
              # A member whose volume came back empty is a new node without slots: the operator
              # forgets the old one and joins it to its shard as a replica.
              printf 'cluster-announce-ip %s\n' "$POD_IP" >> "$conf"
              {{- if .Restore }}
              # A shard's first member restored from a backup (dump.rdb, no AOF yet): the server
              # starts with appendonly off, which loads the snapshot; as a new node it claims the
              # slots it holds keys of, and the operator gives it the rest of its shard's slots in
              # the backup and turns its AOF on once it is loaded. Once the AOF holds the data (a
              # manifest), the snapshot's copy is not needed.
              if [ -e /data/dump.rdb ] && [ ! -e /data/appendonlydir/appendonly.aof.manifest ]; then
                echo "a restored snapshot on the volume: starting with it, the AOF off until the operator turns it on" >&2
                printf 'appendonly no\n' >> "$conf"
              else
                rm -f /data/dump.rdb
              fi
              {{- end }}
              exec {{ include "server" . }}-server "$conf"
              {{- else }}
              {{- with .Restore }}
              # A restored snapshot (dump.rdb) and no AOF yet: the server starts with appendonly
              # off, which loads the snapshot with the replication ID and offset it records (an
              # AOF's base would load the data without them), and the operator turns the AOF on
              # once it is loaded. The first member, until it is elected (labelled primary) or
              # the restore completed, starts as the primary (a primary that loads a snapshot
              # keeps its history as the one it continues): every other member, restored from the
              # same snapshot, then resumes from it with a partial resync, not a full copy. Any
              # other member, or the first one once elected, starts as a replica: a snapshot the
              # AOF does not hold yet may be older than what the member served.
              if [ -e /data/dump.rdb ] && [ ! -e /data/appendonlydir/appendonly.aof.manifest ]; then
                printf 'appendonly no\n' >> "$conf"
                if [ "$POD_NAME" = {{ .Member | quote }} ] && [ "${RESTORE_STATE:-}" != {{ .Done | quote }} ] && [ "$POD_ROLE" != {{ $.RolePrimary }} ]; then
                  echo "the restored snapshot on the volume: starting as the first primary" >&2
                else
                  echo "a restored snapshot on the volume: starting as a replica" >&2
                  printf 'replicaof %s {{ $.Port }}\n' "$PRIMARY_HOST" >> "$conf"
                fi
                exec {{ include "server" $ }}-server "$conf"
              fi
              # Once the AOF holds it (a manifest), the snapshot's copy is not needed.
              rm -f /data/dump.rdb
              {{- end }}
              # The member decides its own role, so that the cache stays writable without the
              # operator: labelled primary (the downward API, resolved at each container start)
              # and holding data, it starts as the primary it was; otherwise (a replica, or a
              # primary whose volume came back empty: the empty-restart guard) as a replica of
              # the read-write Service, never serving an empty dataset to the others.
              if [ "$POD_ROLE" = {{ .RolePrimary }} ] && [ -n "$(ls /data/appendonlydir/*.manifest /data/dump.rdb 2>/dev/null)" ]; then
                echo "labelled {{ .RolePrimary }} with data on the volume: starting as the primary" >&2
              else
                printf 'replicaof %s {{ .Port }}\n' "$PRIMARY_HOST" >> "$conf"
              fi
              exec {{ include "server" . }}-server "$conf"
              {{- end }}
          env:
            - name: REDIS_CONFIG
              value: {{ include "redis.conf" . | toJson }}
            - name: REDIS_LIVE_CONFIG
              valueFrom:
                configMapKeyRef:
                  name: {{ .ConfigName | quote }}
                  key: {{ .LiveConfigKey }}
            - name: POD_ROLE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.labels['{{ .RoleLabel }}']
            {{- if .Sharded }}
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            {{- else }}
            - name: PRIMARY_HOST
              value: {{ .ReadWriteHost | quote }}
            {{- end }}
            {{- with and (not .Sharded) .Restore }}
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: RESTORE_STATE
              valueFrom:
                configMapKeyRef:
                  name: {{ $.ConfigName | quote }}
                  key: {{ .StateKey }}
                  optional: true
            {{- end }}
            - name: PASSWORD_SHA256
              valueFrom:
                secretKeyRef:
                  name: {{ .SecretName | quote }}
                  key: {{ .Keys.PasswordHash }}
            - name: PREVIOUS_PASSWORD_SHA256
              valueFrom:
                secretKeyRef:
                  name: {{ .SecretName | quote }}
                  key: {{ .Keys.PreviousHash }}
                  optional: true
            - name: INTERNAL_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: {{ .SecretName | quote }}
                  key: {{ .Keys.Internal }}
            - name: PREVIOUS_INTERNAL_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: {{ .SecretName | quote }}
                  key: {{ .Keys.PreviousInternal }}
                  optional: true
            - name: REDIS_USERS
              valueFrom:
                configMapKeyRef:
                  name: {{ .ConfigName | quote }}
                  key: {{ .UsersConfigKey }}
            {{- if .SnapshotFormat }}
            - name: DATA_LOSS_ALLOWED
              valueFrom:
                configMapKeyRef:
                  name: {{ .ConfigName | quote }}
                  key: {{ .DataLoss.Key }}
                  optional: true
            {{- end }}
          ports:
            - name: redis
              containerPort: {{ .Port }}
              protocol: TCP
            {{- if .Sharded }}
            - name: cluster-bus
              containerPort: {{ .ClusterBusPort }}
              protocol: TCP
            {{- end }}
          # A planned removal of the primary (delete, eviction, scale-down) waits for the
          # operator's handover; see probe.handover.
          lifecycle:
            preStop:
              exec:
                command: [sh, -c, {{ include "probe.handover" . | quote }}]
          # Startup: until the server has loaded its dataset (PING answers PONG, not LOADING) and
          # is ready (probe.ready: a primary, or a replica linked and in sync). Each run waits for
          # that itself, up to 55 s, and returns as soon as it holds, so that a member that is
          # simply starting (a new member is a replica of the read-write Service until the
          # operator elects the first primary) never fails a probe, which the kubelet reports as a
          # Warning Event. Up to an hour in all, so that liveness never kills a server loading a
          # large AOF.
          startupProbe:
            exec:
              command: [sh, -c, {{ include "probe.started" . | quote }}]
            periodSeconds: 60
            timeoutSeconds: 60
            failureThreshold: 60
          # Ready: a primary that answers; a replica only while its link to the primary is up and
          # no sync is in progress, so a stale replica leaves the Services' endpoints. Every 5 s:
          # each probe starts three processes in the container, on every member, all the time.
          readinessProbe:
            exec:
              command: [sh, -c, {{ include "probe.ready" . | quote }}]
            periodSeconds: 5
            timeoutSeconds: 2
            failureThreshold: 3
          # Alive: it answers at all (LOADING counts: a replica loads the dataset after a full sync).
          livenessProbe:
            exec:
              command: [sh, -c, {{ include "probe.alive" . | quote }}]
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 6
          {{- with .Spec.Resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: data
              mountPath: /data
            - name: tmp
              mountPath: /tmp
            # The internal password alone, for the probes (probe.cli), updated in place.
            - name: internal
              mountPath: {{ include "internal.dir" . }}
              readOnly: true
            {{- if .TLS.Mounted }}
            # The members' certificate, its key and the CA bundle, not the CA's key; updated in
            # place when renewed.
            - name: tls
              mountPath: {{ .TLS.Dir }}
              readOnly: true
            {{- end }}
      volumes:
        {{- if .TLS.Mounted }}
        - name: tls
          secret:
            secretName: {{ .TLS.SecretName | quote }}
            defaultMode: 0440
            items:
              - key: {{ .TLS.Keys.Cert }}
                path: {{ .TLS.Keys.Cert }}
              - key: {{ .TLS.Keys.Key }}
                path: {{ .TLS.Keys.Key }}
              - key: {{ .TLS.Keys.Bundle }}
                path: {{ .TLS.Keys.Bundle }}
        {{- end }}
        - name: internal
          secret:
            secretName: {{ .SecretName | quote }}
            defaultMode: 0440
            items:
              - key: {{ .Keys.Internal }}
                path: {{ .Keys.Internal }}
        - name: tmp
          emptyDir:
            medium: Memory
            sizeLimit: 16Mi
  volumeClaimTemplates:
    - metadata:
        name: data
        labels:
          {{- toYaml .MemberSelector | nindent 10 }}
      spec:
        {{- with .Spec.Storage.StorageClassName }}
        storageClassName: {{ . | quote }}
        {{- end }}
        accessModes: [ReadWriteOnce]
        resources:
          requests:
            storage: {{ .Spec.Storage.Size | quote }}
{{- end }}

{{/* member.pdb: the PodDisruptionBudget of a member StatefulSet (see pdb.yaml). */}}
{{- define "member.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .MemberSet | quote }}
spec:
  maxUnavailable: {{ if .Spec.Hibernate }}{{ .Spec.Replicas }}{{ else }}{{ max 1 (div (sub .Spec.Replicas 1) 2) }}{{ end }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- toYaml .MemberSelector | nindent 6 }}
{{- end }}
