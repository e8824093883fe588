// Package chart holds inorder's Helm chart (inorder/); its tests render it with the Helm SDK and decode
// every document strictly into the Kubernetes and Prometheus Operator types.
package chart_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/inorder-dev/inorder/deploy/internal/strict"
)

// shutdownTimeout is inorder run's default --shutdown-timeout: the grace period must be longer.
const shutdownTimeout = 15

// objects are a rendering's documents, decoded strictly, by kind.
type objects struct {
	ConfigMaps      []*corev1.ConfigMap
	Services        []*corev1.Service
	Deployments     []*appsv1.Deployment
	Jobs            []*batchv1.Job
	CronJobs        []*batchv1.CronJob
	PDBs            []*policyv1.PodDisruptionBudget
	PodMonitors     []*monitoringv1.PodMonitor
	ServiceMonitors []*monitoringv1.ServiceMonitor
	PrometheusRules []*monitoringv1.PrometheusRule
	kinds           []string
}

func (o *objects) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	for _, c := range o.ConfigMaps {
		if c.Name == name {
			return c
		}
	}
	require.Failf(t, "no ConfigMap", "%s", name)
	return nil
}

func loadChart(t *testing.T) *chartv2.Chart {
	t.Helper()
	ch, err := loader.Load("inorder")
	require.NoError(t, err)
	return ch
}

// render renders the chart as helm install would (release "inorder" in namespace "payments"), with the
// values given over the chart's own, in strict mode: a template that reads a value the chart does not
// define is an error.
func render(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	ch := loadChart(t)
	vals, err := chartutil.ToRenderValues(ch, values,
		chartcommon.ReleaseOptions{Name: "inorder", Namespace: "payments", IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, vals)
}

// decode decodes every document of a rendering strictly (a field the type does not have is an error)
// into its API type; a kind the chart is not meant to make, a Secret above all, fails the test.
func decode(t *testing.T, files map[string]string) *objects {
	t.Helper()
	o := &objects{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if path.Ext(name) != ".yaml" {
			continue // NOTES.txt, _helpers.tpl
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[name], -1) {
			var meta struct{ APIVersion, Kind string }
			require.NoError(t, yaml.Unmarshal([]byte(doc), &meta), name)
			if meta.Kind == "" {
				var rest map[string]any
				require.NoError(t, yaml.Unmarshal([]byte(doc), &rest))
				require.Empty(t, rest, "%s: a document without a kind", name)
				continue
			}
			var into any
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 ConfigMap":
				into = appendNew(&o.ConfigMaps)
			case "v1 Service":
				into = appendNew(&o.Services)
			case "apps/v1 Deployment":
				into = appendNew(&o.Deployments)
			case "batch/v1 Job":
				into = appendNew(&o.Jobs)
			case "batch/v1 CronJob":
				into = appendNew(&o.CronJobs)
			case "policy/v1 PodDisruptionBudget":
				into = appendNew(&o.PDBs)
			case "monitoring.coreos.com/v1 PodMonitor":
				into = appendNew(&o.PodMonitors)
			case "monitoring.coreos.com/v1 ServiceMonitor":
				into = appendNew(&o.ServiceMonitors)
			case "monitoring.coreos.com/v1 PrometheusRule":
				into = appendNew(&o.PrometheusRules)
			default:
				require.Failf(t, "a kind the chart does not make", "%s: %s %s (the chart never creates a Secret: it refers to the operator's)",
					name, meta.APIVersion, meta.Kind)
			}
			require.NoError(t, strict.Decode([]byte(doc), into), "%s\n%s", name, doc)
			o.kinds = append(o.kinds, meta.Kind)
		}
	}
	return o
}

func appendNew[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

func mustRender(t *testing.T, values map[string]any) *objects {
	t.Helper()
	files, err := render(t, values)
	require.NoError(t, err)
	return decode(t, files)
}

// envFrom returns the Secret and key a container's variable is read from.
func envFrom(t *testing.T, c corev1.Container, name string) (secret, key string) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			require.NotNil(t, e.ValueFrom, name)
			require.NotNil(t, e.ValueFrom.SecretKeyRef, name)
			return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	require.Failf(t, "no variable", "%s in %s", name, c.Name)
	return "", ""
}

// checkPodSecurity requires today's securityContext (not root, the image's user, nothing to escalate to,
// a read-only root, no capability) plus the runtime's seccomp profile.
func checkPodSecurity(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	require.NotNil(t, sc)
	require.True(t, *sc.RunAsNonRoot)
	require.Equal(t, int64(65532), *sc.RunAsUser, "the image's user")
	require.Equal(t, int64(65532), *sc.RunAsGroup)
	require.NotNil(t, sc.SeccompProfile)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	require.False(t, *pod.AutomountServiceAccountToken, "inorder never calls the Kubernetes API")
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		csc := c.SecurityContext
		require.NotNil(t, csc, c.Name)
		require.False(t, *csc.AllowPrivilegeEscalation, c.Name)
		require.True(t, *csc.ReadOnlyRootFilesystem, c.Name)
		require.Equal(t, []corev1.Capability{"ALL"}, csc.Capabilities.Drop, c.Name)
		require.NotEmpty(t, c.Resources.Requests, c.Name)
		require.NotEmpty(t, c.Resources.Limits, c.Name)
	}
}

// configVars are the environment variables a configuration file reads: ${VAR} and the *-env keys.
var configVars = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|-env: *([A-Za-z_][A-Za-z0-9_]*)`)

// TestChartWithDefaultValues renders the chart with its default values, as `helm install` with no --set
// would, and checks what the chart promises: two replicas of one configuration file from its ConfigMap,
// preferred anti-affinity by hostname, a PodDisruptionBudget over the same pods, the securityContext with
// a seccomp profile, probes on /readyz and /healthz at the metrics address the file serves, the image at
// the chart's appVersion, every secret from a Secret the operator made, and inorder migrate as a
// pre-install and pre-upgrade hook. No Secret, and no monitoring object unless asked for.
func TestChartWithDefaultValues(t *testing.T) {
	t.Parallel()
	o := mustRender(t, nil)
	slices.Sort(o.kinds)
	require.Equal(t, []string{"ConfigMap", "Deployment", "Job", "PodDisruptionBudget"}, o.kinds)
	appVersion := loadChart(t).Metadata.AppVersion
	require.NotEmpty(t, appVersion)
	image := "registry.example.com/inorder:" + appVersion

	dep := o.Deployments[0]
	require.Equal(t, int32(2), *dep.Spec.Replicas)
	require.Equal(t, appVersion, dep.Labels["app.kubernetes.io/version"], "the version the pods run")
	pod := dep.Spec.Template.Spec
	checkPodSecurity(t, pod)
	require.Greater(t, *pod.TerminationGracePeriodSeconds, int64(shutdownTimeout))
	podLabels := dep.Spec.Template.Labels
	require.Equal(t, dep.Spec.Selector.MatchLabels, podLabels)

	anti := pod.Affinity.PodAntiAffinity
	require.Empty(t, anti.RequiredDuringSchedulingIgnoredDuringExecution, "preferred: two replicas still schedule on one node")
	require.Len(t, anti.PreferredDuringSchedulingIgnoredDuringExecution, 1)
	term := anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	require.Equal(t, "kubernetes.io/hostname", term.TopologyKey)
	require.Equal(t, podLabels, term.LabelSelector.MatchLabels, "away from its own replicas")

	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, image, c.Image)
	require.Equal(t, []string{"run", "--config", "/etc/inorder/inorder.yaml"}, c.Args)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "metrics", c.ReadinessProbe.HTTPGet.Port.String())
	require.Equal(t, "metrics", c.LivenessProbe.HTTPGet.Port.String())
	require.Equal(t, "metrics", c.Ports[0].Name)
	secret, key := envFrom(t, c, "DATABASE_URL")
	require.Equal(t, []string{"inorder-database", "DATABASE_URL"}, []string{secret, key})
	secret, key = envFrom(t, c, "SMS_SECRET")
	require.Equal(t, []string{"inorder-sms", "secret"}, []string{secret, key})

	require.Equal(t, "/etc/inorder", c.VolumeMounts[0].MountPath)
	config := o.configMap(t, pod.Volumes[0].ConfigMap.Name)
	var file struct {
		DatabaseURL string           `json:"database-url"`
		MetricsAddr string           `json:"metrics-addr"`
		Processes   []map[string]any `json:"processes"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(config.Data["inorder.yaml"]), &file))
	require.Equal(t, "${DATABASE_URL}", file.DatabaseURL, "the URL comes from the Secret, not the file")
	require.NotEmpty(t, file.Processes)
	require.Equal(t, fmt.Sprintf(":%d", c.Ports[0].ContainerPort), file.MetricsAddr, "the probes reach the metrics address")
	for _, m := range configVars.FindAllStringSubmatch(config.Data["inorder.yaml"], -1) {
		name := m[1] + m[2]
		secret, _ := envFrom(t, c, name)
		require.NotEmpty(t, secret, "the file reads %s: the pod has it from a Secret", name)
	}
	require.NotEmpty(t, dep.Spec.Template.Annotations["checksum/config"], "a changed file rolls the pods")

	job := o.Jobs[0]
	require.Equal(t, "pre-install,pre-upgrade", job.Annotations["helm.sh/hook"])
	require.Contains(t, job.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation")
	jpod := job.Spec.Template.Spec
	checkPodSecurity(t, jpod)
	require.Equal(t, corev1.RestartPolicyNever, jpod.RestartPolicy)
	require.Equal(t, image, jpod.Containers[0].Image)
	require.Equal(t, []string{"migrate"}, jpod.Containers[0].Args)
	secret, key = envFrom(t, jpod.Containers[0], "DATABASE_URL")
	require.Equal(t, []string{"inorder-database", "DATABASE_URL"}, []string{secret, key})
	require.NotEqual(t, podLabels, job.Spec.Template.Labels, "the Deployment's selector and the PDB do not count the migration")

	pdb := o.PDBs[0]
	require.Equal(t, podLabels, pdb.Spec.Selector.MatchLabels)
	require.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue(), "a standby takes over from the one evicted")
}

// everything are values that turn on every part of the chart and set every value a user may.
func everything() map[string]any {
	on := func(more map[string]any) map[string]any {
		m := map[string]any{"enabled": true}
		for k, v := range more {
			m[k] = v
		}
		return m
	}
	return map[string]any{
		"image":            map[string]any{"repository": "ghcr.example/acme/inorder", "tag": "v0.2.0", "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "registry"}},
		"replicaCount":     3,
		"database":         map[string]any{"existingSecret": "app-db", "key": "url"},
		"migrate":          map[string]any{"existingSecret": "app-db-owner", "key": "owner-url"},
		"secretEnv": []any{
			map[string]any{"name": "PAY_SECRET", "existingSecret": "pay", "key": "signing"},
			map[string]any{"name": "KAFKA_PASSWORD", "existingSecret": "kafka", "key": "password"},
		},
		"env": []any{map[string]any{"name": "GOMEMLIMIT", "value": "200MiB"}},
		"config": map[string]any{
			"start-from": "now",
			"processes": []any{
				map[string]any{"process": "payments", "table": "payment_events", "handler": "webhook",
					"webhook-url": "https://pay.example/hooks", "webhook-secret-env": "PAY_SECRET", "key-column": "account_id"},
				map[string]any{"process": "ledger", "table": "ledger_events", "handler": "kafka",
					"kafka-brokers": "kafka:9092", "kafka-topic": "ledger", "kafka-password": "${KAFKA_PASSWORD}"},
			},
		},
		"metrics": map[string]any{"port": 9300},
		"prune": on(map[string]any{"schedule": "0 4 * * *", "olderThan": "90d", "actor": "retention",
			"existingSecret": "app-db-pruner", "key": "pruner-url",
			"tables": []any{map[string]any{"table": "payment_events"}, map[string]any{"table": `sales."Ledger Events"`, "olderThan": "720h"}}}),
		"podDisruptionBudget":       map[string]any{"enabled": true, "maxUnavailable": 2},
		"nodeSelector":              map[string]any{"kubernetes.io/arch": "arm64"},
		"tolerations":               []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "outbox", "effect": "NoSchedule"}},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "inorder"}}}},
		"priorityClassName":         "outbox",
		"podAnnotations":            map[string]any{"example.com/team": "payments"},
		"podLabels":                 map[string]any{"team": "payments"},
		"service":                   on(nil),
		"podMonitor":                on(map[string]any{"labels": map[string]any{"release": "prom"}, "interval": "15s"}),
		"serviceMonitor":            on(map[string]any{"labels": map[string]any{"release": "prom"}}),
		"prometheusRule":            on(map[string]any{"labels": map[string]any{"release": "prom"}}),
		"grafanaDashboard":          on(map[string]any{"labels": map[string]any{"team": "payments"}, "annotations": map[string]any{"grafana_folder": "Outbox"}}),
	}
}

// TestChartWithEverythingEnabled renders the chart with every part turned on and every value set, decodes
// it strictly, and checks that the monitors select the pods' metrics port, that the PrometheusRule holds
// deploy/prometheus/rules.yaml and the dashboard's ConfigMap deploy/grafana/inorder.json as they are, and
// that what the values name reaches the pods.
func TestChartWithEverythingEnabled(t *testing.T) {
	t.Parallel()
	o := mustRender(t, everything())
	slices.Sort(o.kinds)
	require.Equal(t, []string{"ConfigMap", "ConfigMap", "CronJob", "CronJob", "Deployment", "Job", "PodDisruptionBudget", "PodMonitor",
		"PrometheusRule", "Service", "ServiceMonitor"}, o.kinds)

	dep := o.Deployments[0]
	require.Equal(t, int32(3), *dep.Spec.Replicas)
	pod := dep.Spec.Template.Spec
	checkPodSecurity(t, pod)
	c := pod.Containers[0]
	require.Equal(t, "ghcr.example/acme/inorder:v0.2.0", c.Image)
	require.Equal(t, "v0.2.0", dep.Labels["app.kubernetes.io/version"], "the version label follows image.tag")
	require.Equal(t, "v0.2.0", o.Jobs[0].Labels["app.kubernetes.io/version"])
	require.Equal(t, corev1.PullAlways, c.ImagePullPolicy)
	require.Equal(t, int32(9300), c.Ports[0].ContainerPort)
	secret, key := envFrom(t, c, "DATABASE_URL")
	require.Equal(t, []string{"app-db", "url"}, []string{secret, key})
	secret, key = envFrom(t, c, "KAFKA_PASSWORD")
	require.Equal(t, []string{"kafka", "password"}, []string{secret, key})
	require.Equal(t, "payments", dep.Spec.Template.Labels["team"])
	require.Equal(t, "arm64", pod.NodeSelector["kubernetes.io/arch"])
	require.Len(t, pod.Tolerations, 1)
	require.Len(t, pod.TopologySpreadConstraints, 1)
	require.Equal(t, "outbox", pod.PriorityClassName)
	require.Equal(t, "registry", pod.ImagePullSecrets[0].Name)
	secret, key = envFrom(t, o.Jobs[0].Spec.Template.Spec.Containers[0], "DATABASE_URL")
	require.Equal(t, []string{"app-db-owner", "owner-url"}, []string{secret, key}, "the migration may run as the schema's owner")
	config := o.configMap(t, "inorder")
	require.Contains(t, config.Data["inorder.yaml"], `metrics-addr: ":9300"`)
	for _, m := range configVars.FindAllStringSubmatch(config.Data["inorder.yaml"], -1) {
		envFrom(t, c, m[1]+m[2])
	}
	require.Equal(t, 2, o.PDBs[0].Spec.MaxUnavailable.IntValue())

	// A prune CronJob per table, as deploy/kubernetes has one.
	require.Len(t, o.CronJobs, 2)
	for i, want := range []struct{ name, table, age string }{
		{"inorder-prune-payment-events", "payment_events", "90d"},
		{"inorder-prune-sales-ledger-events", `sales."Ledger Events"`, "720h"},
	} {
		cron := o.CronJobs[i]
		require.Equal(t, want.name, cron.Name)
		require.Equal(t, "0 4 * * *", cron.Spec.Schedule)
		require.Equal(t, batchv1.ForbidConcurrent, cron.Spec.ConcurrencyPolicy)
		require.Equal(t, "v0.2.0", cron.Labels["app.kubernetes.io/version"])
		jpod := cron.Spec.JobTemplate.Spec.Template.Spec
		checkPodSecurity(t, jpod)
		require.Equal(t, corev1.RestartPolicyNever, jpod.RestartPolicy)
		require.NotEqual(t, dep.Spec.Selector.MatchLabels, cron.Spec.JobTemplate.Spec.Template.Labels, "the Deployment's selector and the PDB do not count the prune")
		pc := jpod.Containers[0]
		require.Equal(t, "ghcr.example/acme/inorder:v0.2.0", pc.Image)
		require.Equal(t, []string{"prune", "--table", want.table, "--older-than", want.age, "--actor", "retention"}, pc.Args)
		secret, key := envFrom(t, pc, "DATABASE_URL")
		require.Equal(t, []string{"app-db-pruner", "pruner-url"}, []string{secret, key})
	}

	selector := dep.Spec.Selector.MatchLabels
	pm := o.PodMonitors[0]
	require.Equal(t, selector, pm.Spec.Selector.MatchLabels)
	require.Equal(t, "prom", pm.Labels["release"])
	require.Equal(t, "metrics", *pm.Spec.PodMetricsEndpoints[0].Port)
	jobOf := func(relabelings []monitoringv1.RelabelConfig) string {
		t.Helper()
		require.Len(t, relabelings, 1)
		require.Equal(t, "job", relabelings[0].TargetLabel)
		require.Empty(t, relabelings[0].SourceLabels)
		return *relabelings[0].Replacement
	}
	require.Equal(t, "inorder", jobOf(pm.Spec.PodMetricsEndpoints[0].RelabelConfigs), "the job the alerts read")
	require.Equal(t, monitoringv1.Duration("15s"), pm.Spec.PodMetricsEndpoints[0].Interval)
	svc := o.Services[0]
	require.Equal(t, selector, svc.Spec.Selector)
	require.Equal(t, "metrics", svc.Spec.Ports[0].Name)
	require.Equal(t, "metrics", svc.Spec.Ports[0].TargetPort.String())
	sm := o.ServiceMonitors[0]
	for k, v := range sm.Spec.Selector.MatchLabels {
		require.Equal(t, v, svc.Labels[k], "the ServiceMonitor selects the Service")
	}
	require.Equal(t, "metrics", sm.Spec.Endpoints[0].Port)
	require.Equal(t, "inorder", jobOf(sm.Spec.Endpoints[0].RelabelConfigs), "the same job whichever monitor scrapes")

	// The rules of deploy/prometheus, each reading the release's namespace and job rather than the job
	// named inorder, and the dashboard as it is in deploy/grafana.
	rule := o.PrometheusRules[0]
	require.Equal(t, "prom", rule.Labels["release"])
	var want monitoringv1.PrometheusRuleSpec
	rules, err := os.ReadFile("../prometheus/rules.yaml")
	require.NoError(t, err)
	require.Contains(t, string(rules), `{job="inorder"}`)
	scoped := strings.ReplaceAll(string(rules), `job="inorder"`, `namespace="payments", job="inorder"`)
	require.NoError(t, strict.Decode([]byte(scoped), &want))
	require.NotEmpty(t, want.Groups)
	require.Equal(t, want, rule.Spec)

	dash := o.configMap(t, "inorder-dashboard")
	require.Equal(t, "1", dash.Labels["grafana_dashboard"], "Grafana's sidecar loads ConfigMaps so labelled")
	require.Equal(t, "payments", dash.Labels["team"])
	require.Equal(t, "Outbox", dash.Annotations["grafana_folder"])
	file, err := os.ReadFile("../grafana/inorder.json")
	require.NoError(t, err)
	require.JSONEq(t, string(file), dash.Data["inorder.json"])
	require.True(t, json.Valid([]byte(dash.Data["inorder.json"])))
}

// TestChartMigrationReadsTheDatabaseKey renders the chart with the database URL under a key of the
// operator's choosing and nothing set for the migration: the hook Job reads the same Secret and key as
// the pods, or it could not start and the install would fail after activeDeadlineSeconds.
func TestChartMigrationReadsTheDatabaseKey(t *testing.T) {
	t.Parallel()
	o := mustRender(t, map[string]any{"database": map[string]any{"existingSecret": "app-db", "key": "url"}})
	secret, key := envFrom(t, o.Deployments[0].Spec.Template.Spec.Containers[0], "DATABASE_URL")
	require.Equal(t, []string{"app-db", "url"}, []string{secret, key})
	require.Len(t, o.Jobs, 1)
	secret, key = envFrom(t, o.Jobs[0].Spec.Template.Spec.Containers[0], "DATABASE_URL")
	require.Equal(t, []string{"app-db", "url"}, []string{secret, key}, "the migration reads the key the pods read")

	o = mustRender(t, map[string]any{"database": map[string]any{"existingSecret": "app-db", "key": "url"},
		"migrate": map[string]any{"existingSecret": "app-db-owner"}})
	secret, key = envFrom(t, o.Jobs[0].Spec.Template.Spec.Containers[0], "DATABASE_URL")
	require.Equal(t, []string{"app-db-owner", "url"}, []string{secret, key}, "a Secret of its own, the same key unless migrate.key says")
}

// TestChartPruneDefaults renders the prune CronJob with only prune.enabled: the nightly prune of the
// example table at 30 days, with the database URL the pods read. Off, there is none.
func TestChartPruneDefaults(t *testing.T) {
	t.Parallel()
	require.Empty(t, mustRender(t, nil).CronJobs, "deleting rows is the operator's decision")
	o := mustRender(t, map[string]any{"prune": map[string]any{"enabled": true},
		"database": map[string]any{"existingSecret": "app-db", "key": "url"}})
	require.Len(t, o.CronJobs, 1)
	cron := o.CronJobs[0]
	require.Equal(t, "15 3 * * *", cron.Spec.Schedule)
	c := cron.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"prune", "--table", "bookings", "--older-than", "30d", "--actor", "k8s-cronjob"}, c.Args)
	secret, key := envFrom(t, c, "DATABASE_URL")
	require.Equal(t, []string{"app-db", "url"}, []string{secret, key})
}

// TestChartRulesReadTheJobGiven renders the PrometheusRule with prometheusRule.job set, for pods scraped by
// something other than the chart's monitors: every expression reads that job in the release's namespace.
func TestChartRulesReadTheJobGiven(t *testing.T) {
	t.Parallel()
	o := mustRender(t, map[string]any{"prometheusRule": map[string]any{"enabled": true, "job": "payments/outbox"},
		"podMonitor": map[string]any{"enabled": true}})
	require.Equal(t, "payments/outbox", *o.PodMonitors[0].Spec.PodMetricsEndpoints[0].RelabelConfigs[0].Replacement)
	n := 0
	for _, g := range o.PrometheusRules[0].Spec.Groups {
		for _, r := range g.Rules {
			require.Contains(t, r.Expr.String(), `{namespace="payments", job="payments/outbox"}`, r.Alert)
			require.NotContains(t, r.Expr.String(), `job="inorder"`, r.Alert)
			n++
		}
	}
	require.Positive(t, n)
}

// TestChartFilesAreTheirSources requires the chart's files/ to be copies of deploy/prometheus/rules.yaml
// and deploy/grafana/inorder.json, byte for byte: real files rather than links, which helm lint and
// template warn of for each, and which helm package would not follow on every system.
func TestChartFilesAreTheirSources(t *testing.T) {
	t.Parallel()
	for file, source := range map[string]string{
		"inorder/files/rules.yaml":   "../prometheus/rules.yaml",
		"inorder/files/inorder.json": "../grafana/inorder.json",
	} {
		info, err := os.Lstat(file)
		require.NoError(t, err)
		require.True(t, info.Mode().IsRegular(), "%s: a file, not a link", file)
		got, err := os.ReadFile(file)
		require.NoError(t, err)
		want, err := os.ReadFile(source)
		require.NoError(t, err)
		require.True(t, string(want) == string(got), "%s differs from %s: cp deploy/%s deploy/chart/%s", file, source,
			strings.TrimPrefix(source, "../"), file)
	}
}

// TestChartRefusesWhatWouldNotWork: values that would make a release that cannot work (or pins nothing),
// and values the chart does not know (values.schema.json), fail the rendering with a message naming the
// value.
func TestChartRefusesWhatWouldNotWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values map[string]any
		says   string
	}{
		{"latest", map[string]any{"image": map[string]any{"tag": "latest"}}, "image.tag: pin a version"},
		{"no database secret", map[string]any{"database": map[string]any{"existingSecret": ""}}, "database.existingSecret"},
		{"a database URL in the file", map[string]any{"config": map[string]any{"database-url": "postgres://u:p@db/app"}}, "config.database-url"},
		{"a metrics address in the file", map[string]any{"config": map[string]any{"metrics-addr": ":9000"}}, "config.metrics-addr"},
		{"a sink secret with no Secret", map[string]any{"secretEnv": []any{map[string]any{"name": "X", "key": "k"}}}, "secretEnv[].existingSecret"},
		{"a misspelt value", map[string]any{"replicaCounts": 3}, "replicaCounts"},
		{"a misspelt nested value", map[string]any{"podMonitor": map[string]any{"enable": true}}, "enable"},
		{"a grace period within the shutdown timeout", map[string]any{"terminationGracePeriodSeconds": 10}, "terminationGracePeriodSeconds"},
		{"a prune age prune cannot read", map[string]any{"prune": map[string]any{"enabled": true, "olderThan": "a month"}}, "olderThan"},
		{"a prune table without its name", map[string]any{"prune": map[string]any{"enabled": true, "tables": []any{map[string]any{"olderThan": "30d"}}}}, "table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := render(t, tc.values)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.says), "%v", err)
		})
	}
}
