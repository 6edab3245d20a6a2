package main

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"example.com/cache-operator/localcluster/node/images"
)

// Pull back-off, as the kubelet's: 10 s doubling up to 5 minutes (MaxBackoff when shorter, as the
// local cluster runs with a short one).
const pullInitialBackoff = 10 * time.Second

// pull makes the image of container c present as its imagePullPolicy asks, and reports it as a
// kubelet does: Events Pulling and Pulled ("already present on machine" when IfNotPresent finds
// it), ErrImagePull then ImagePullBackOff while a build fails, ErrImageNeverPull when the policy
// is Never and it is absent. "Pulling" is building the image's root (package images) if it is not
// built, or finding it. It returns the root (nil for the scratch and host roots), or ok false
// when the pod stopped.
func (r *podRuntime) pull(c *containerState, image *images.Image) (root *images.Root, ok bool) {
	ref := c.spec.Image
	if image.Root == images.Scratch || image.Root == images.Host {
		return nil, true // nothing to build: the programs and this machine's files
	}
	recipe := r.cfg.Images.Roots[image.Root]
	backoff := time.Duration(0)
	for {
		if r.isStopping() {
			return nil, false
		}
		found, present := r.cfg.Roots.Find(image.Root, recipe)
		policy := c.spec.ImagePullPolicy
		switch {
		case policy == corev1.PullNever && !present:
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", ref)
			r.event(corev1.EventTypeWarning, "ErrImageNeverPull", msg)
			if !r.waiting(c, "ErrImageNeverPull", msg, 20*time.Second) {
				return nil, false
			}
			continue
		case present && policy != corev1.PullAlways:
			r.event(corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine; %s", ref, runs(image, found)))
			return found, true
		}
		r.event(corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", ref))
		r.mu.Lock()
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		r.mu.Unlock()
		r.publish()
		start := time.Now()
		built, _, err := r.cfg.Roots.Ensure(r.stoppedCtx(), image.Root, recipe, func(line string) {
			klog.InfoS("Image", "image", ref, "progress", line)
		})
		if err == nil {
			took := time.Since(start).Round(time.Millisecond)
			r.event(corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes. %s",
				ref, took, took, built.Size, runs(image, built)))
			return built, true
		}
		if r.isStopping() {
			return nil, false
		}
		msg := fmt.Sprintf("Failed to pull image %q: %v", ref, err)
		r.event(corev1.EventTypeWarning, "Failed", msg)
		r.event(corev1.EventTypeWarning, "Failed", "Error: ErrImagePull")
		r.mu.Lock()
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: msg}}
		r.mu.Unlock()
		r.publish()
		backoff = nextBackoff(backoff, min(r.cfg.MaxBackoff, 5*time.Minute))
		r.event(corev1.EventTypeNormal, "BackOff", fmt.Sprintf("Back-off pulling image %q", ref))
		if !r.waiting(c, "ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q: %v", ref, err), backoff) {
			return nil, false
		}
	}
}

// runs says which server version an image's root runs, and how its tag is mapped.
func runs(image *images.Image, root *images.Root) string {
	if image.VersionPackage == "" || root == nil {
		return ""
	}
	s := fmt.Sprintf("Runs %s %s (Debian %s %s).", image.VersionPackage, images.UpstreamVersion(root.Versions[image.VersionPackage]),
		root.Suite, root.Versions[image.VersionPackage])
	if image.Note != "" {
		s += " " + image.Note + "."
	}
	return s
}

// imageID is a container's status.imageID: the root's recipe digest, with the package and the
// version that run, so that kubectl get pod -o jsonpath='{..imageID}' shows the real version.
func imageID(image *images.Image, root *images.Root) string {
	if root == nil {
		return "node-agent://" + image.Repository + "/" + image.Root
	}
	id := "rootfs://" + root.Name
	if image.VersionPackage != "" {
		id += "/" + image.VersionPackage + "=" + root.Versions[image.VersionPackage]
	}
	return id + "@" + root.Digest
}
