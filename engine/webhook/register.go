package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/conversion"
)

// Names of what the operator registers.
const (
	WebhookConfigName = "cache-operator"
	ValidatingWebhook = "validate.managedcaches.cache.example.com"
	ConvertPath       = "/convert"
	ValidatePath      = "/validate"
	servicePort       = 443
)

// Endpoint is where the API server reaches the webhooks: a URL (running outside the cluster) or
// a Service (deployed in it).
type Endpoint struct {
	// URL is the base URL, for example https://127.0.0.1:9443; empty in Service mode.
	URL string
	// ServiceNamespace and ServiceName name the Service in Service mode.
	ServiceNamespace, ServiceName string
	// OwnerClusterRole, when set, names the ClusterRole the ValidatingWebhookConfiguration is owned
	// by (the operator's own, from its manifests or chart): uninstalling the operator deletes it,
	// and the garbage collector then deletes the configuration, which would otherwise be left
	// calling a webhook that is gone.
	OwnerClusterRole string
}

func (e Endpoint) clientConfig(path string, caBundle []byte) admissionregistrationv1.WebhookClientConfig {
	if e.URL != "" {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(e.URL + path), CABundle: caBundle}
	}
	return admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: e.ServiceNamespace, Name: e.ServiceName, Path: ptr.To(path), Port: ptr.To[int32](servicePort)},
		CABundle: caBundle,
	}
}

// matchCondition limits the webhook to what its rules judge: an update to a lower member count or
// another version or engine, a v1 create, and a v1 update of the v2-spec annotation (v1 carries no
// engine name and no shards, so the CRD cannot check them: they are in that annotation).
// Everything else (v2 creates, finalizer and other annotation changes, scaling up) never calls it,
// so those keep working while the operator is down (v1 needs it anyway, for conversion). (A
// schedule, and adding or removing spec.shards in v2, are judged by the CRD; a v2 change of
// spec.shards calls it only while status.reshard shows a reshard running, which it refuses.)
const matchCondition = `request.operation == 'CREATE' ? request.kind.version == 'v1' : has(request.subResource) && request.subResource == 'scale' ? object.spec.replicas < oldObject.spec.replicas : (
  (request.kind.version == 'v1' &&
    (has(object.metadata.annotations) && '` + conversion.SpecAnnotation + `' in object.metadata.annotations ? object.metadata.annotations['` + conversion.SpecAnnotation + `'] : '') !=
    (has(oldObject.metadata.annotations) && '` + conversion.SpecAnnotation + `' in oldObject.metadata.annotations ? oldObject.metadata.annotations['` + conversion.SpecAnnotation + `'] : '')) ||
  (has(object.spec.size) && has(oldObject.spec.size) && object.spec.size < oldObject.spec.size) ||
  (has(object.spec.shards) && has(oldObject.spec.shards) && object.spec.shards != oldObject.spec.shards &&
    has(oldObject.status) && has(oldObject.status.reshard)) ||
  (has(object.spec.replicas) && has(oldObject.spec.replicas) && object.spec.replicas < oldObject.spec.replicas) ||
  (has(object.spec.version) && has(oldObject.spec.version) && object.spec.version != oldObject.spec.version) ||
  (has(object.spec.engine) && has(oldObject.spec.engine) && has(object.spec.engine.version) &&
    has(oldObject.spec.engine.version) && object.spec.engine.version != oldObject.spec.engine.version) ||
  (has(object.spec.engine) && has(oldObject.spec.engine) &&
    (has(object.spec.engine.name) ? object.spec.engine.name : 'redis') != (has(oldObject.spec.engine.name) ? oldObject.spec.engine.name : 'redis')))`

// desiredWebhookConfig is the ValidatingWebhookConfiguration, with every field the API server
// would default set explicitly, so that comparing it with the live object finds no false drift.
func desiredWebhookConfig(e Endpoint, caBundle []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName, Labels: map[string]string{api.LabelName: api.FieldManager}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         ValidatingWebhook,
			ClientConfig: e.clientConfig(ValidatePath, caBundle),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"cache.example.com"}, APIVersions: []string{"v1", "v2"},
					Resources: []string{"managedcaches", "managedcaches/scale"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"cache.example.com"}, APIVersions: []string{"v1"},
					Resources: []string{"managedcaches"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			// Exact: a v2 create must not match the v1 create rule through conversion, which
			// would make every v2 create need the operator (a conversion) while it is down.
			MatchPolicy:             ptr.To(admissionregistrationv1.Exact),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "judged-changes", Expression: matchCondition}},
		}},
	}
}

// register points the CRD's conversion webhook and the ValidatingWebhookConfiguration at e with
// caBundle, writing only what differs from the live objects.
func register(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, e Endpoint, caBundle []byte) error {
	if err := registerConversion(ctx, dyn, e, caBundle); err != nil {
		return err
	}
	return registerValidation(ctx, kube, e, caBundle)
}

func registerConversion(ctx context.Context, dyn dynamic.Interface, e Endpoint, caBundle []byte) error {
	crd, err := dyn.Resource(api.CRDResource).Get(ctx, api.CRDName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("CustomResourceDefinition/%s: %w (install it first: make install)", api.CRDName, err)
	}
	cc := e.clientConfig(ConvertPath, caBundle)
	want := map[string]interface{}{"caBundle": base64.StdEncoding.EncodeToString(caBundle)}
	if cc.URL != nil {
		want["url"] = *cc.URL
	} else {
		want["service"] = map[string]interface{}{"namespace": cc.Service.Namespace, "name": cc.Service.Name, "path": *cc.Service.Path, "port": int64(*cc.Service.Port)}
	}
	strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy")
	live, _, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig")
	if strategy == "Webhook" && reflect.DeepEqual(live, want) {
		return nil
	}
	patchCC := map[string]interface{}{"caBundle": want["caBundle"], "url": nil, "service": nil}
	for k, v := range want {
		patchCC[k] = v
	}
	patch, _ := json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"conversion": map[string]interface{}{
		"strategy": "Webhook",
		"webhook":  map[string]interface{}{"conversionReviewVersions": []string{"v1"}, "clientConfig": patchCC},
	}}})
	if _, err := dyn.Resource(api.CRDResource).Patch(ctx, api.CRDName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager}); err != nil {
		return fmt.Errorf("CustomResourceDefinition/%s: setting the conversion webhook: %w", api.CRDName, err)
	}
	klog.InfoS("Registered the conversion webhook", "crd", api.CRDName)
	return nil
}

// OwnerReference is a reference to the ClusterRole named name (nil for ""): the owner of what the
// operator creates for itself (the webhook configuration, its certificate Secret, the leader
// Lease), so that deleting the operator's manifests or uninstalling its chart deletes them too.
func OwnerReference(ctx context.Context, kube kubernetes.Interface, name string) (*metav1.OwnerReference, error) {
	if name == "" {
		return nil, nil
	}
	role, err := kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ClusterRole/%s, the owner of the operator's own objects (--webhook-owner): %w", name, err)
	}
	return &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}, nil
}

func registerValidation(ctx context.Context, kube kubernetes.Interface, e Endpoint, caBundle []byte) error {
	hooks := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	want := desiredWebhookConfig(e, caBundle)
	owner, err := OwnerReference(ctx, kube, e.OwnerClusterRole)
	if err != nil {
		return err
	}
	if owner != nil {
		want.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	live, err := hooks.Get(ctx, WebhookConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := hooks.Create(ctx, want, metav1.CreateOptions{FieldManager: api.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ValidatingWebhookConfiguration/%s: %w", WebhookConfigName, err)
		}
		klog.InfoS("Registered the validating webhook", "config", WebhookConfigName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("ValidatingWebhookConfiguration/%s: %w", WebhookConfigName, err)
	}
	if reflect.DeepEqual(live.Webhooks, want.Webhooks) && reflect.DeepEqual(live.Labels, want.Labels) && reflect.DeepEqual(live.OwnerReferences, want.OwnerReferences) {
		return nil
	}
	want.ResourceVersion = live.ResourceVersion
	if _, err := hooks.Update(ctx, want, metav1.UpdateOptions{FieldManager: api.FieldManager}); err != nil {
		return fmt.Errorf("ValidatingWebhookConfiguration/%s: %w", WebhookConfigName, err)
	}
	klog.InfoS("Updated the validating webhook", "config", WebhookConfigName)
	return nil
}
