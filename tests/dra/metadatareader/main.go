// Command dra-metadata-reader reads a DRA device metadata file (KEP-5304) the way a workload
// does: with the consumer package of k8s.io/dynamic-resource-allocation
// (devicemetadata), from the documented path inside the container. It is our test peer,
// run inside a container that the real containerd started with the claim's CDI devices.
//
//	dra-metadata-reader resourceclaims <driver> <claim name> <request>
//	dra-metadata-reader resourceclaimtemplates <driver> <pod claim name> <request>
//
// Prints one JSON object on stdout:
//
//	{"path": P, "read": {requests: N}, "objects": [{"apiVersion": V, "validation": E}],
//	 "decoded": {"apiVersion": V, "validation": E, "metadata": <v1beta1 DeviceMetadata>}}
//
// "read" is what the package's path helper (ReadResourceClaimMetadataWithDriverName or the
// template variant) returned; "objects" each object of the stream decoded and validated on
// its own; "decoded" the whole stream as DecodeMetadataFromStream reads it (the first version
// it knows), validated. Exit 1 with the error on stderr when the file cannot be read.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

type object struct {
	APIVersion string                           `json:"apiVersion"`
	Validation string                           `json:"validation"`
	Metadata   *metadatav1beta1.DeviceMetadata `json:"metadata,omitempty"`
}

func main() {
	if len(os.Args) != 5 {
		fail(errors.New("usage: dra-metadata-reader resourceclaims|resourceclaimtemplates DRIVER NAME REQUEST"))
	}
	kind, driver, name, request := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	var path string
	var read *metadata.DeviceMetadata
	var err error
	switch kind {
	case metadata.ResourceClaimsSubDir:
		path = metadata.ResourceClaimFilePath(driver, name, request)
		read, err = devicemetadata.ReadResourceClaimMetadataWithDriverName(driver, name, request)
	case metadata.ResourceClaimTemplatesSubDir:
		path = metadata.ResourceClaimTemplateFilePath(driver, name, request)
		read, err = devicemetadata.ReadResourceClaimTemplateMetadataWithDriverName(driver, name, request)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		fail(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	objects, err := each(data)
	if err != nil {
		fail(err)
	}
	decoded, err := decode(data, true)
	if err != nil {
		fail(err)
	}
	out := map[string]any{"path": path, "read": map[string]int{"requests": len(read.Requests)},
		"objects": objects, "decoded": decoded}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

// each decodes and validates every object of the stream on its own.
func each(data []byte) ([]object, error) {
	var objects []object
	stream := json.NewDecoder(bytes.NewReader(data))
	for {
		var raw json.RawMessage
		if err := stream.Decode(&raw); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, fmt.Errorf("read stream object %d: %w", len(objects), err)
		}
		one, err := decode(raw, false)
		if err != nil {
			return nil, fmt.Errorf("stream object %d: %w", len(objects), err)
		}
		objects = append(objects, *one)
	}
}

func decode(data []byte, withObject bool) (*object, error) {
	var dm metadatav1beta1.DeviceMetadata
	var invalid error
	var gvk schema.GroupVersionKind
	err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(bytes.NewReader(data)), &dm,
		devicemetadata.DecodeMetadataWithValidationResult(&invalid),
		devicemetadata.DecodeMetadataStoreGVKResult(&gvk))
	if err != nil {
		return nil, err
	}
	out := &object{APIVersion: gvk.GroupVersion().String()}
	if invalid != nil {
		out.Validation = invalid.Error()
	}
	if withObject {
		out.Metadata = &dm
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "dra-metadata-reader: %v\n", err)
	os.Exit(1)
}
