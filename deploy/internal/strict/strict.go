// Package strict decodes a YAML document into an API type as strictly as the Kubernetes API server does:
// a field the type does not have, a field given twice, or a field in the wrong case (readOnlyRootFileSystem)
// is an error. encoding/json, under sigs.k8s.io/yaml's UnmarshalStrict, matches names in any case.
package strict

import (
	"errors"
	"fmt"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode decodes the YAML document doc into v, refusing what the API server would refuse.
func Decode(doc []byte, v any) error {
	data, err := yaml.YAMLToJSONStrict(doc) // a key given twice is an error
	if err != nil {
		return err
	}
	strictErrs, err := sigsjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("strict decoding: %w", errors.Join(strictErrs...))
	}
	return nil
}
