// kubelet-checkpoint: writes the kubelet's device-manager checkpoint exactly as the kubelet
// does, from a JSON description of what each container was allocated. The allocate
// responses are marshalled with the device plugin API's own protobuf types
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1, google.golang.org/protobuf/proto.Marshal,
// as pkg/kubelet/cm/devicemanager/pod_devices.go toCheckpointData does) and the file with
// the kubelet's checkpoint package (pkg/kubelet/cm/devicemanager/checkpoint: New,
// MarshalCheckpoint, with its checksum), so gpupool's reader is judged by the writer.
//
// Standard input: {"registered": {resource: [ids]}, "entries": [{"podUID", "container",
// "resource", "ids": {numa: [ids]}, "envs": {}, "annotations": {}, "cdiDevices": [],
// "mounts": [{"containerPath", "hostPath"}], "devices": [{"containerPath", "hostPath"}]}]}.
// Standard output: the checkpoint file's bytes.
//
// Test infrastructure only; the product imports none of it.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
)

type path struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
}

type entry struct {
	PodUID      string             `json:"podUID"`
	Container   string             `json:"container"`
	Resource    string             `json:"resource"`
	IDs         map[int64][]string `json:"ids"`
	Envs        map[string]string  `json:"envs"`
	Annotations map[string]string  `json:"annotations"`
	CDIDevices  []string           `json:"cdiDevices"`
	Mounts      []path             `json:"mounts"`
	Devices     []path             `json:"devices"`
}

type input struct {
	Registered map[string][]string `json:"registered"`
	Entries    []entry             `json:"entries"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-checkpoint:", err)
		os.Exit(2)
	}
	var entries []checkpoint.PodDevicesEntry
	for _, e := range in.Entries {
		resp := &pluginapi.ContainerAllocateResponse{Envs: e.Envs, Annotations: e.Annotations}
		for _, n := range e.CDIDevices {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: n})
		}
		for _, m := range e.Mounts {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath,
				HostPath: m.HostPath, ReadOnly: true})
		}
		for _, d := range e.Devices {
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{
				ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: "rw"})
		}
		blob, err := proto.Marshal(resp)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubelet-checkpoint:", err)
			os.Exit(1)
		}
		entries = append(entries, checkpoint.PodDevicesEntry{PodUID: e.PodUID,
			ContainerName: e.Container, ResourceName: e.Resource,
			DeviceIDs: checkpoint.DevicesPerNUMA(e.IDs), AllocResp: blob})
	}
	out, err := checkpoint.New(entries, in.Registered).MarshalCheckpoint()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-checkpoint:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}
