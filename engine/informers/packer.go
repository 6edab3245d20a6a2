/*
Copyright 2026 The cache-operator Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package informers is the operator's view of the cluster: the informers of ManagedCaches, of
// every kind the templates render and of the members' pods, and how they hold those objects. The
// operator's memory is mostly these caches, so objects are held packed: the metadata that keys and
// routes them, and the rest as JSON compressed against a dictionary of sample children. Pods keep
// only what a member pass reads.
//
// It is not for deciding anything: the controller (package controller) and the member passes
// (package dataplane) add their own event handlers and read through Set's lookups.
package informers

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/klauspost/compress/zstd"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"example.com/cache-operator/engine/render"
)

// What the informers hold: each object in a compact form, the metadata that keys it and routes its
// events, and the rest as compressed JSON that a reconcile decodes when it reads the object. As
// nested maps a StatefulSet costs about 30 KiB; as JSON about 6; compressed against the rendered
// sample children (which every real child resembles) a few hundred bytes.

// Packer compresses the JSON of the objects the informers hold, and decompresses it again. Its
// dictionary is the JSON of sample children rendered by the process's own templates, so a child
// compresses to little more than what makes it differ from the samples.
type Packer struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// packerDictID names the dictionary inside each compressed frame (any value; one dictionary).
const packerDictID = 0x63616368

func newPacker(dict []byte) (*Packer, error) {
	eopts := []zstd.EOption{
		zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
		zstd.WithWindowSize(1 << 17), zstd.WithLowerEncoderMem(true), zstd.WithEncoderConcurrency(2),
	}
	dopts := []zstd.DOption{zstd.WithDecoderLowmem(true), zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(1 << 20)}
	if len(dict) > 0 {
		eopts = append(eopts, zstd.WithEncoderDictRaw(packerDictID, dict))
		dopts = append(dopts, zstd.WithDecoderDictRaw(packerDictID, dict))
	}
	enc, err := zstd.NewWriter(nil, eopts...)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, dopts...)
	if err != nil {
		return nil, err
	}
	return &Packer{enc: enc, dec: dec}, nil
}

// NewSamplesPacker returns the packer of the informers: its dictionary is the JSON of the sample
// children renderer renders.
func NewSamplesPacker(renderer *render.Renderer) (*Packer, error) {
	samples, err := renderer.Samples(metav1.NamespaceDefault, "cache")
	if err != nil {
		return nil, fmt.Errorf("rendering sample caches: %w", err)
	}
	dict, err := samplesDict(samples)
	if err != nil {
		return nil, err
	}
	return newPacker(dict)
}

// samplesDict is the dictionary: the JSON of the sample children, one after the other, each both
// as the dynamic informers encode it (keys sorted) and, for a built-in kind, as the typed ones
// do (keys in field order).
func samplesDict(samples []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	for _, s := range samples {
		raw, err := s.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b.Write(raw)
		typed, err := scheme.Scheme.New(s.GroupVersionKind())
		if err != nil {
			continue // not a built-in kind: read by a dynamic informer only
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(s.Object, typed); err != nil {
			return nil, err
		}
		if raw, err = json.Marshal(typed); err != nil {
			return nil, err
		}
		b.Write(raw)
	}
	return b.Bytes(), nil
}

// pack compresses raw JSON.
func (p *Packer) pack(raw []byte) []byte {
	return bytes.Clone(p.enc.EncodeAll(raw, nil)) // Clone: the encoder leaves room to spare
}

func (p *Packer) unpack(packed []byte) (*unstructured.Unstructured, error) {
	raw, err := p.dec.DecodeAll(packed, nil)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(raw)
}
