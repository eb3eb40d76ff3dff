// cel-judge evaluates DRA device selectors with Kubernetes' own CEL compiler for them
// (k8s.io/dynamic-resource-allocation/cel, the code kube-scheduler's allocator runs): one
// JSON request per line on stdin, {"expression": "...", "device": {"driver": "...",
// "attributes": {"domain/name": {"string"|"int"|"bool"|"version": ...}}, "capacity":
// {"domain/name": "quantity"}}}, one JSON answer per line on stdout: {"compileError": "..."}
// or {"match": true|false} or {"runtimeError": "..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type attribute struct {
	String  *string `json:"string,omitempty"`
	Int     *int64  `json:"int,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	Version *string `json:"version,omitempty"`
}

type request struct {
	Expression string `json:"expression"`
	Device     struct {
		Driver     string               `json:"driver"`
		Attributes map[string]attribute `json:"attributes"`
		Capacity   map[string]string    `json:"capacity"`
	} `json:"device"`
}

func main() {
	compiler := dracel.GetCompiler(dracel.Features{})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(map[string]string{"compileError": "bad request: " + err.Error()})
			continue
		}
		result := compiler.CompileCELExpression(req.Expression, dracel.Options{})
		if result.Error != nil {
			_ = out.Encode(map[string]string{"compileError": result.Error.Error()})
			continue
		}
		dev := dracel.Device{Driver: req.Device.Driver,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}}
		for name, a := range req.Device.Attributes {
			dev.Attributes[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{
				StringValue: a.String, IntValue: a.Int, BoolValue: a.Bool, VersionValue: a.Version}
		}
		for name, q := range req.Device.Capacity {
			dev.Capacity[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{
				Value: resource.MustParse(q)}
		}
		match, _, err := result.DeviceMatches(context.Background(), dev)
		if err != nil {
			_ = out.Encode(map[string]string{"runtimeError": err.Error()})
			continue
		}
		_ = out.Encode(map[string]bool{"match": match})
	}
}
