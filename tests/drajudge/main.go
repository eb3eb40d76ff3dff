// dra-judge: can a node allocate a pod's ResourceClaims? Decided by Kubernetes' own
// structured-parameters allocator (k8s.io/dynamic-resource-allocation v0.35.4,
// structured.NewAllocator and Allocate: the code kube-scheduler's DRA plugin runs node by
// node), with the features of the suite's scheduler (prioritized lists, admin access, device
// taints, partitionable devices, consumable capacity).
//
// Each line of standard input is one question:
//
//	{"classes": [DeviceClass...], "slices": [ResourceSlice...], "allocated": [ResourceClaim...],
//	 "claims": [ResourceClaim...], "nodes": [Node...]}
//
// "allocated" are the claims already allocated in the cluster (their devices are in use, as
// the scheduler's claim tracker gathers them: kubernetes v1.35.4
// pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go,
// foreachAllocatedDevice); "claims" are the pod's claims to allocate together. Each line out
// is {"nodes": {"<node>": "ok" | "no" | "error: <the allocator's error>"}}: an error is fatal
// for the scheduling attempt (the DRA plugin's Filter returns it as an Error status).
//
// Test infrastructure only; the product imports none of it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

type question struct {
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Allocated []*resourceapi.ResourceClaim `json:"allocated"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Nodes     []*v1.Node                   `json:"nodes"`
}

type answer struct {
	Nodes map[string]string `json:"nodes,omitempty"`
	Error string            `json:"error,omitempty"`
}

type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, dc := range c {
		out = append(out, dc)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if dc, ok := c[name]; ok {
		return dc, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

var features = structured.Features{
	AdminAccess:          true,
	PrioritizedList:      true,
	DeviceTaints:         true,
	PartitionableDevices: true,
	ConsumableCapacity:   true,
}

// allocatedState gathers the devices in use as the scheduler's claim tracker does.
func allocatedState(claims []*resourceapi.ResourceClaim) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(result.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// defaults applies what the API server's defaulting would have applied to the claims as
// stored (kubernetes v1.35.4 pkg/apis/resource/v1/defaults.go: SetDefaults_ExactDeviceRequest,
// SetDefaults_DeviceSubRequest; a toleration's operator defaults to Equal).
func defaults(claims []*resourceapi.ResourceClaim) {
	mode := func(m *resourceapi.DeviceAllocationMode, count *int64, tolerations []resourceapi.DeviceToleration) {
		if *m == "" {
			*m = resourceapi.DeviceAllocationModeExactCount
		}
		if *m == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
			*count = 1
		}
		for i := range tolerations {
			if tolerations[i].Operator == "" {
				tolerations[i].Operator = resourceapi.DeviceTolerationOpEqual
			}
		}
	}
	for _, c := range claims {
		for i := range c.Spec.Devices.Requests {
			r := &c.Spec.Devices.Requests[i]
			if r.Exactly != nil {
				mode(&r.Exactly.AllocationMode, &r.Exactly.Count, r.Exactly.Tolerations)
			}
			for j := range r.FirstAvailable {
				s := &r.FirstAvailable[j]
				mode(&s.AllocationMode, &s.Count, s.Tolerations)
			}
		}
	}
}

func decide(q question) answer {
	ctx := context.Background()
	defaults(q.Claims)
	defaults(q.Allocated)
	cls := classes{}
	for _, dc := range q.Classes {
		cls[dc.Name] = dc
	}
	alloc, err := structured.NewAllocator(ctx, features, allocatedState(q.Allocated), cls,
		q.Slices, cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		return answer{Error: err.Error()}
	}
	out := answer{Nodes: map[string]string{}}
	for _, node := range q.Nodes {
		out.Nodes[node.Name] = allocate(ctx, alloc, node, q.Claims)
	}
	return out
}

// allocate answers for one node; a panic inside the allocator is reported as such (v0.35.4
// panics on some partitionable pools in allocationMode All: checkAvailableCounters on a
// device of a pool gathered only through its shared counters).
func allocate(ctx context.Context, alloc structured.Allocator, node *v1.Node,
	claims []*resourceapi.ResourceClaim) (answer string) {
	defer func() {
		if r := recover(); r != nil {
			answer = fmt.Sprintf("panic: %v", r)
		}
	}()
	result, err := alloc.Allocate(ctx, node, claims)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case result == nil:
		return "no"
	default:
		return "ok"
	}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<28)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var q question
		if err := json.Unmarshal(in.Bytes(), &q); err != nil {
			enc.Encode(answer{Error: fmt.Sprintf("bad question: %v", err)})
			continue
		}
		enc.Encode(decide(q))
	}
}
