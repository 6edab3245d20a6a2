package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/cachetls"
	"example.com/cache-operator/engine/credentials"
	"example.com/cache-operator/engine/informers"
	"example.com/cache-operator/engine/metrics"
)

// The decisions a reconcile makes from a cache's Secrets before rendering: its credentials
// (<name>-auth) and its certificates (<name>-tls). Both are written by the children's loop, over
// the resourceVersion they were decided from.

// auth decides the cache's credentials from its live Secret (credentials.Decide). A refused password is
// reported once per value, with an Event; the end of an overlap brings the cache back.
func (c *Controller) auth(mc *unstructured.Unstructured) (credentials.Decision, error) {
	key := mc.GetNamespace() + "/" + mc.GetName()
	secret, err := c.child(informers.Secret, mc.GetNamespace(), api.SecretName(mc.GetName()))
	if err != nil {
		return credentials.Decision{}, err
	}
	c.secretKept(mc, secret)
	restored := false
	if secret == nil {
		// Gone all the same (its finalizer removed by hand): the passwords in force are those of
		// the last copy seen, not new ones the members would refuse.
		if secret = c.lastSecret(mc); secret != nil {
			restored = true
		}
	}
	ann := mc.GetAnnotations()
	tokens := credentials.Tokens{Password: ann[api.RotatePasswordAnnotation], Internal: ann[api.RotateInternalPasswordAnnotation]}
	d, err := credentials.Decide(secret, tokens, time.Now(), c.opts.PasswordOverlap)
	if err != nil {
		return d, err
	}
	if restored {
		d.SecretVersion = "" // written with a create
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.EventCredentialsRestored,
			"Secret %s was deleted (its finalizer removed): written back from the last copy the operator saw, with the same passwords (revision %d)",
			api.SecretName(mc.GetName()), d.Auth.Revision)
	}
	if d.Rejected == "" {
		c.rejectedPasswords.Delete(key)
	} else if prev, _ := c.rejectedPasswords.Swap(key, d.RejectedHash); prev != d.RejectedHash {
		c.recorder.Eventf(mc, corev1.EventTypeWarning, api.ReasonPasswordRejected, "%s; the members keep the password of revision %d", d.Rejected, d.Auth.Revision)
	}
	if d.Rotated {
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.ReasonPasswordRotated, "Password revision %d accepted; the previous password is accepted until %s", d.Auth.Revision, d.Auth.PreviousUntil)
	}
	if d.InternalRotated {
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.ReasonPasswordRotated, "Internal password rotated; the previous one is accepted until %s", d.Auth.PreviousInternalUntil)
	}
	if !d.OverlapEnds.IsZero() {
		c.queue.AddAfter(key, time.Until(d.OverlapEnds)+time.Second)
	}
	return d, nil
}

// certificates decides a TLS cache's certificates from its live TLS Secret (cachetls.Decide),
// records a renewal with an Event and the expiry in the metric, and comes back when the next one
// is due. A cache that had TLS keeps its Secret, renewed likewise, while it serves plain text; a
// cache that never had TLS has none.
func (c *Controller) certificates(mc *unstructured.Unstructured, spec api.Spec) (cachetls.Decision, error) {
	secret, err := c.child(informers.Secret, mc.GetNamespace(), api.TLSSecretName(mc.GetName()))
	if err != nil || (!spec.TLS && secret == nil) {
		return cachetls.Decision{}, err
	}
	d, err := cachetls.Decide(secret, mc.GetName(), mc.GetNamespace(), c.opts.Render.ClusterDomain,
		mc.GetAnnotations()[api.RotateCertificatesAnnotation], c.opts.CertificateLifetime, time.Now())
	if err != nil {
		return d, err
	}
	if d.Renewed && secret != nil {
		c.recorder.Eventf(mc, corev1.EventTypeNormal, api.EventCertificateRenewed, "Certificate renewed: serial %s, valid until %s", d.Serial, d.NotAfter.UTC().Format(time.RFC3339))
	}
	if spec.TLS {
		metrics.CertificateExpiry(mc.GetNamespace(), mc.GetName(), d.NotAfter)
	} else {
		metrics.ForgetCertificate(mc.GetNamespace(), mc.GetName())
	}
	c.queue.AddAfter(mc.GetNamespace()+"/"+mc.GetName(), time.Until(d.RenewAt)+time.Second)
	return d, nil
}
