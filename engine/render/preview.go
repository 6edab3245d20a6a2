package render

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/conversion"
)

// PreviewPassword stands in for the password in a preview: the operator generates the real one
// when it creates the cache, and keeps it.
const PreviewPassword = "generated-when-the-cache-is-created"

// Preview reads ManagedCaches (v1 or v2, a YAML stream of one or more documents) from in and
// writes to out the children each would get, as a YAML stream: what `cache-operator render -f`
// prints, so that a template change can be reviewed before it ships. A v1 cache is converted as
// the API server would through the conversion webhook, a cache without a namespace is put in
// "default" (as kubectl does), and password stands in for the generated passwords. Nothing is read
// from or written to a cluster. An invalid cache fails with the message the operator would put in
// its status, naming the document.
func Preview(in io.Reader, out io.Writer, r *Renderer, cfg Config, password string) error {
	caches, err := readCaches(in)
	if err != nil {
		return err
	}
	if len(caches) == 0 {
		return errors.New("no ManagedCache in the input")
	}
	var b strings.Builder
	for _, mc := range caches {
		spec, err := api.SpecFrom(mc)
		if err != nil {
			return fmt.Errorf("ManagedCache %s/%s: %w", mc.GetNamespace(), mc.GetName(), err)
		}
		auth := SimpleAuth(password)
		auth.Internal = password
		objs, err := r.Children(mc, spec, cfg, auth)
		if err != nil {
			return fmt.Errorf("ManagedCache %s/%s: %w", mc.GetNamespace(), mc.GetName(), err)
		}
		fmt.Fprintf(&b, "# Children of ManagedCache %s/%s", mc.GetNamespace(), mc.GetName())
		if mc.GetUID() == "" {
			// A cache not yet created has no UID for its children's owner reference.
			for _, o := range objs {
				o.SetOwnerReferences(nil)
			}
			b.WriteString(" (each gets an owner reference to the cache when created)")
		}
		docs, err := YAMLStream(objs)
		if err != nil {
			return err
		}
		b.WriteString("\n" + docs)
	}
	_, err = io.WriteString(out, b.String())
	return err
}

// YAMLStream writes objs as a YAML stream, each document opened by "---".
func YAMLStream(objs []*unstructured.Unstructured) (string, error) {
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return "", fmt.Errorf("%s/%s: %w", o.GetKind(), o.GetName(), err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String(), nil
}

// readCaches decodes every document of a YAML stream as a ManagedCache converted to v2.
func readCaches(in io.Reader) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		u, err := decodeDocument(string(doc))
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if u == nil {
			continue // only comments
		}
		if gk := u.GroupVersionKind().GroupKind(); gk != api.GroupVersion.WithKind(api.Kind).GroupKind() {
			return nil, fmt.Errorf("document %d: a %s, not a ManagedCache (%s)", i, u.GetKind(), api.GroupVersion.Group)
		}
		if u.GetNamespace() == "" {
			u.SetNamespace(metav1.NamespaceDefault)
		}
		v2, err := conversion.Convert(u.Object, conversion.V2)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, &unstructured.Unstructured{Object: v2})
	}
}
