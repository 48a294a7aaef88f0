// staticpod turns the chart's rendered DaemonSet into the static pod a
// standalone kubelet runs (the VM has no API server): the pod template as
// rendered, but for what only an API server can give a pod, a service
// account and ConfigMaps, whose files it writes to --config-out for a
// hostPath at --config-path instead.
//
//	helm template … | staticpod --config-out DIR --config-path /etc/oomguard-chart > pod.yaml
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	out := flag.String("config-out", "", "directory to write the ConfigMap's files to")
	path := flag.String("config-path", "/etc/oomguard-chart", "where those files are on the node")
	flag.Parse()
	if err := convert(os.Stdin, os.Stdout, *out, *path); err != nil {
		fmt.Fprintf(os.Stderr, "staticpod: %v\n", err)
		os.Exit(1)
	}
}

func convert(in io.Reader, w io.Writer, out, path string) error {
	rendered, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var ds *appsv1.DaemonSet
	var cm *corev1.ConfigMap
	for _, doc := range strings.Split(string(rendered), "\n---") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return err
		}
		var head struct{ Kind string }
		json.Unmarshal(j, &head)
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		switch head.Kind {
		case "DaemonSet":
			ds = &appsv1.DaemonSet{}
			err = dec.Decode(ds)
		case "ConfigMap":
			cm = &corev1.ConfigMap{}
			err = dec.Decode(cm)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", head.Kind, err)
		}
	}
	if ds == nil || cm == nil {
		return fmt.Errorf("want a DaemonSet and a ConfigMap in the rendered chart")
	}
	spec := ds.Spec.Template.Spec
	spec.ServiceAccountName = ""
	for i, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		if v.ConfigMap.Name != cm.Name {
			return fmt.Errorf("volume %s: ConfigMap %s is not the chart's", v.Name, v.ConfigMap.Name)
		}
		dir := corev1.HostPathDirectory
		spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dir}}
	}
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(out, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels, Annotations: ds.Spec.Template.Annotations},
		Spec:       spec,
	}
	b, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
