// Package kubernetes holds inorder's plain Kubernetes manifests (inorder.yaml) and a kustomize base of
// them (kustomization.yaml), for those without Helm; its tests decode them strictly into the API types.
package kubernetes_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/inorder-dev/inorder/deploy/internal/strict"
)

// shutdownTimeout is inorder run's default --shutdown-timeout: the grace period must be longer.
const shutdownTimeout = 15

// operatorSecrets are the Secrets and keys that inorder.yaml's comments tell the operator to create
// (kubectl create secret generic NAME --from-literal=KEY=...), which the manifests never do.
func operatorSecrets(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("inorder.yaml")
	require.NoError(t, err)
	secrets := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^#\s+kubectl create secret generic (\S+) --from-literal=(\w+)=`).FindAllStringSubmatch(string(data), -1) {
		secrets[m[1]] = append(secrets[m[1]], m[2])
	}
	require.NotEmpty(t, secrets)
	return secrets
}

// checkManifests decodes every document of data strictly (a field the type does not have, or in the
// wrong case, is an error) into its API type, and checks what the comments promise: no Secret, so that
// applying never overwrites the operator's; two replicas that run the configuration file mounted from
// the ConfigMap after migrating the schema, spread over nodes when possible, with a PodDisruptionBudget;
// probes on /readyz and /healthz at the metrics address the file serves; a grace period longer than the
// shutdown timeout; not root, with a seccomp profile; every secret from a Secret the operator made; an
// image pinned to the chart's appVersion; and the prune CronJob.
func checkManifests(t *testing.T, data string) *corev1.ConfigMap {
	t.Helper()
	var (
		dep    appsv1.Deployment
		cron   batchv1.CronJob
		config corev1.ConfigMap
		pdb    policyv1.PodDisruptionBudget
	)
	kinds := map[string]any{"Deployment": &dep, "CronJob": &cron, "ConfigMap": &config, "PodDisruptionBudget": &pdb}
	seen := map[string]bool{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(data, -1) {
		var meta struct{ Kind string }
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		if meta.Kind == "" && strings.TrimSpace(doc) == "" {
			continue
		}
		into, ok := kinds[meta.Kind]
		require.True(t, ok, "unexpected kind %q (no Secret: the operator creates them)", meta.Kind)
		require.False(t, seen[meta.Kind], "one %s", meta.Kind)
		require.NoError(t, strict.Decode([]byte(doc), into), meta.Kind)
		seen[meta.Kind] = true
	}
	require.Len(t, seen, len(kinds), "every kind is there")

	chartYAML, err := os.ReadFile("../chart/inorder/Chart.yaml")
	require.NoError(t, err)
	var chart struct{ AppVersion string }
	require.NoError(t, yaml.Unmarshal(chartYAML, &chart))
	image := "registry.example.com/inorder:" + chart.AppVersion

	require.Equal(t, int32(2), *dep.Spec.Replicas)
	pod := dep.Spec.Template.Spec
	secrets := operatorSecrets(t)
	checkPod(t, pod, image, secrets)
	require.Greater(t, *pod.TerminationGracePeriodSeconds, int64(shutdownTimeout))
	labels := dep.Spec.Template.Labels
	require.Equal(t, dep.Spec.Selector.MatchLabels, labels)
	anti := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	require.Len(t, anti, 1)
	require.Equal(t, "kubernetes.io/hostname", anti[0].PodAffinityTerm.TopologyKey)
	require.Equal(t, labels, anti[0].PodAffinityTerm.LabelSelector.MatchLabels)
	require.Equal(t, labels, pdb.Spec.Selector.MatchLabels)
	require.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue())

	require.Len(t, pod.InitContainers, 1)
	require.Equal(t, []string{"migrate"}, pod.InitContainers[0].Args, "the schema is migrated before inorder run starts")
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, []string{"run", "--config", "/etc/inorder/inorder.yaml"}, c.Args)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
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
	for _, m := range regexp.MustCompile(`\$\{(\w+)\}|-env: *(\w+)`).FindAllStringSubmatch(config.Data["inorder.yaml"], -1) {
		name := m[1] + m[2]
		require.True(t, slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }),
			"the file reads %s: the pod has it", name)
	}

	job := cron.Spec.JobTemplate.Spec.Template.Spec
	checkPod(t, job, image, secrets)
	require.Equal(t, "prune", job.Containers[0].Args[0])
	require.Equal(t, corev1.RestartPolicyNever, job.RestartPolicy)
	return &config
}

// checkPod requires the securityContext (not root, the image's user, the runtime's seccomp profile,
// nothing to escalate to, a read-only root, no capability), resources, the pinned image, and every
// variable from a Secret the operator creates.
func checkPod(t *testing.T, pod corev1.PodSpec, image string, secrets map[string][]string) {
	t.Helper()
	sc := pod.SecurityContext
	require.True(t, *sc.RunAsNonRoot)
	require.Equal(t, int64(65532), *sc.RunAsUser, "the image's user")
	require.NotNil(t, sc.SeccompProfile)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	require.False(t, *pod.AutomountServiceAccountToken, "inorder never calls the Kubernetes API")
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		require.Equal(t, image, c.Image, "%s: pinned to the release, never latest", c.Name)
		csc := c.SecurityContext
		require.False(t, *csc.AllowPrivilegeEscalation, c.Name)
		require.True(t, *csc.ReadOnlyRootFilesystem, c.Name)
		require.Equal(t, []corev1.Capability{"ALL"}, csc.Capabilities.Drop, c.Name)
		require.NotEmpty(t, c.Resources.Requests, c.Name)
		require.Empty(t, c.EnvFrom, "%s: no variable from a whole Secret: each names its key", c.Name)
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			require.NotNil(t, ref, "%s %s", c.Name, e.Name)
			require.Contains(t, secrets[ref.Name], ref.Key, "%s %s: from a Secret the comments tell to create", c.Name, e.Name)
		}
	}
}

// TestTheManifestsAreWhatTheyClaim checks inorder.yaml as kubectl apply -f would take it, its ConfigMap
// holding config/inorder.yaml, the kustomize base's file.
func TestTheManifestsAreWhatTheyClaim(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("inorder.yaml")
	require.NoError(t, err)
	config := checkManifests(t, string(data))
	require.Equal(t, "inorder-config", config.Name)
	file, err := os.ReadFile("config/inorder.yaml")
	require.NoError(t, err)
	require.Equal(t, string(file), config.Data["inorder.yaml"], "the kustomize base's configuration file is the ConfigMap's")
}

// TestTheKustomizeBaseBuilds builds the kustomize base with kubectl kustomize, where the machine has
// kubectl, and checks what it makes as it checks inorder.yaml, with the ConfigMap made from
// config/inorder.yaml and named after a hash of it, which the Deployment mounts.
func TestTheKustomizeBaseBuilds(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	out, err := exec.Command(kubectl, "kustomize", ".").Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s", stderr)
	config := checkManifests(t, string(out))
	file, err := os.ReadFile("config/inorder.yaml")
	require.NoError(t, err)
	require.Equal(t, string(file), config.Data["inorder.yaml"])
	require.Regexp(t, `^inorder-file-[a-z0-9]{10}$`, config.Name, "a hash of the content in the name: an edit rolls the pods")
}
