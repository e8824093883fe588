// Package kubernetes holds inorder's Kubernetes manifests (inorder.yaml); its test decodes them strictly
// into the Kubernetes API types.
package kubernetes_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// shutdownTimeout is inorder run's default --shutdown-timeout: the grace period must be longer.
const shutdownTimeout = 15

// TestTheManifestsAreWhatTheyClaim decodes every document of inorder.yaml strictly (a misspelt field is an
// error) into its API type, and checks what the comments promise: two replicas that run the configuration
// file mounted from the ConfigMap, probes on /readyz and /healthz at the metrics address the file serves,
// a grace period longer than the shutdown timeout, not root, the database URL from the Secret, and the
// prune CronJob.
func TestTheManifestsAreWhatTheyClaim(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("inorder.yaml")
	require.NoError(t, err)
	var (
		dep    appsv1.Deployment
		cron   batchv1.CronJob
		config corev1.ConfigMap
		secret corev1.Secret
	)
	kinds := map[string]any{"Deployment": &dep, "CronJob": &cron, "ConfigMap": &config, "Secret": &secret}
	seen := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct{ Kind string }
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		into, ok := kinds[meta.Kind]
		require.True(t, ok, "unexpected kind %q", meta.Kind)
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), into), meta.Kind)
		seen[meta.Kind] = true
	}
	require.Len(t, seen, len(kinds), "every kind is there")

	require.Equal(t, int32(2), *dep.Spec.Replicas)
	pod := dep.Spec.Template.Spec
	require.Greater(t, *pod.TerminationGracePeriodSeconds, int64(shutdownTimeout))
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.Equal(t, int64(65532), *pod.SecurityContext.RunAsUser, "the image's user")
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, []string{"run", "--config", "/etc/inorder/inorder.yaml"}, c.Args)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, secret.Name, c.EnvFrom[0].SecretRef.Name)
	require.Contains(t, secret.StringData, "DATABASE_URL")
	require.Equal(t, "/etc/inorder", c.VolumeMounts[0].MountPath)
	require.Equal(t, config.Name, pod.Volumes[0].ConfigMap.Name)

	var file struct {
		DatabaseURL string           `json:"database-url"`
		MetricsAddr string           `json:"metrics-addr"`
		Processes   []map[string]any `json:"processes"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(config.Data["inorder.yaml"]), &file))
	require.Equal(t, "${DATABASE_URL}", file.DatabaseURL, "the URL comes from the Secret, not the file")
	require.NotEmpty(t, file.Processes)
	require.Equal(t, ":"+strconv.Itoa(int(c.Ports[0].ContainerPort)), file.MetricsAddr, "the probes reach the metrics address")

	job := cron.Spec.JobTemplate.Spec.Template.Spec
	require.Equal(t, "prune", job.Containers[0].Args[0])
	require.Equal(t, corev1.RestartPolicyNever, job.RestartPolicy)
}
