// hami-allocate asks HAMi's device plugin (v2.10.0, tests/hami/src) which pod an Allocate
// call on a node is for: util.GetPendingPod, the first thing its Allocate does
// (pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go), against a fake API server
// holding the node and its pods as the questions give them. One JSON question per line on
// stdin, {"node": {Node}, "pods": [{Pod}, ...]}; one JSON answer per line on stdout,
// {"pod": "namespace/name"} or {"error": "..."} (Allocate then fails with that error).
// Test infrastructure only: the product imports none of it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"

	"github.com/Project-HAMi/HAMi/pkg/util"
	"github.com/Project-HAMi/HAMi/pkg/util/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

type question struct {
	Node corev1.Node  `json:"node"`
	Pods []corev1.Pod `json:"pods"`
}

type answer struct {
	Pod   string `json:"pod,omitempty"`
	Error string `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var q question
		if err := json.Unmarshal(in.Bytes(), &q); err != nil {
			_ = out.Encode(answer{Error: "question: " + err.Error()})
			continue
		}
		objs := []runtime.Object{q.Node.DeepCopy()}
		for i := range q.Pods {
			objs = append(objs, q.Pods[i].DeepCopy())
		}
		client.KubeClient = fake.NewSimpleClientset(objs...)
		pod, err := util.GetPendingPod(context.Background(), q.Node.Name)
		if err != nil {
			_ = out.Encode(answer{Error: err.Error()})
			continue
		}
		_ = out.Encode(answer{Pod: pod.Namespace + "/" + pod.Name})
	}
}
