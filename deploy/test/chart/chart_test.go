package chart

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/deploy/test/internal/sluicetest"
)

// chartDir is the Helm chart.
var chartDir = filepath.Join("..", "..", "helm", "sluice")

// helmBin returns the helm that `make chart-test` built ($HELM), else helm on PATH.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatal("no helm: run `make chart-test`, which builds the pinned helm from its Go module, or set HELM to a helm binary")
	}
	return h
}

// testRepository is the image repository the chart is rendered with.
const testRepository = "registry.example.com/sluice"

// rendered is one `helm template` output, by kind and name.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMap      *corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	pdb            *policyv1.PodDisruptionBudget
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	serviceMonitor map[string]any
	kinds          []string
}

// render runs `helm template` with the --set values and decodes every manifest into
// its Kubernetes API type, rejecting unknown fields.
func render(t *testing.T, set ...string) *rendered {
	t.Helper()
	args := []string{"template", "rel", chartDir, "--namespace", "ns", "--set", "image.repository=" + testRepository}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	r := &rendered{secrets: map[string]*corev1.Secret{}}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		doc = strings.TrimSpace(strings.TrimPrefix(doc, "---"))
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("a rendered manifest is not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // only comments
		}
		r.kinds = append(r.kinds, head.Kind)
		var obj any
		switch head.Kind {
		case "Deployment":
			r.deployment = &appsv1.Deployment{}
			obj = r.deployment
		case "Service":
			r.service = &corev1.Service{}
			obj = r.service
		case "ConfigMap":
			r.configMap = &corev1.ConfigMap{}
			obj = r.configMap
		case "Secret":
			obj = &corev1.Secret{}
		case "PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			obj = r.pdb
		case "HorizontalPodAutoscaler":
			r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			obj = r.hpa
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ServiceMonitor":
			r.serviceMonitor = map[string]any{}
			obj = &r.serviceMonitor
		default:
			t.Fatalf("helm template rendered a %s, which TestChart does not check", head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("rendered %s: %v\n%s", head.Kind, err, doc)
		}
		if s, ok := obj.(*corev1.Secret); ok {
			r.secrets[s.Name] = s
		}
	}
	return r
}

// TestChart lints the chart and renders it with its defaults and with every option on,
// and checks what a cluster would run: probes on /readyz and /healthz, the HTTP and gRPC
// ports from the container to the Service, a non-root, read-only, capability-free
// container, resources, the ConfigMap mounted as a directory (so that its ..data swap
// reloads in place) holding a configuration sluice loads, the Redis URL from a Secret in
// the variable serve reads, a PodDisruptionBudget, and the optional HPA and ServiceMonitor.
// defaultBounds are the environment the chart's default bounds give: none, so that sluice
// serve's defaults apply (cmd/sluice's TestBinaryRLQSBoundFitsChart fills them under the
// chart's memory limit) and the configuration's store.deny_cache is not overridden.
var defaultBounds = map[string]string{
	"SLUICE_MAX_KEYS": "", "SLUICE_DENY_CACHE_BYTES": "", "SLUICE_MAX_RESERVATIONS": "",
	"SLUICE_RLQS_MAX_STREAMS": "", "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM": "", "SLUICE_MAX_CONNECTIONS": "",
}

func TestChart(t *testing.T) {
	lint := exec.Command(helmBin(t), "lint", "--strict", chartDir, "--set", "redis.url=redis://redis:6379", "--set", "image.repository="+testRepository)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	// No image is published: an install that does not say where its image is fails,
	// and says how to make one, rather than leaving pods pulling forever.
	out, err := exec.Command(helmBin(t), "template", "rel", chartDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "image.repository is not set") || !strings.Contains(string(out), "make image IMAGE=") {
		t.Errorf("helm template without image.repository: err %v, output %s; want a failure saying how to build and push the image", err, out)
	}
	serveHelp, err := exec.Command(sluiceBin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice serve --help: %v\n%s", err, serveHelp)
	}

	for _, tc := range []struct {
		name        string
		set         []string
		redisSecret string // the Secret the Redis URL comes from; "" for none
		createdURL  string // the URL in the Secret the chart creates
		options     bool   // HPA, ServiceMonitor and the admin token are on
		bounds      map[string]string
	}{
		{name: "defaults", bounds: defaultBounds},
		{name: "redis url", set: []string{"redis.url=redis://redis:6379"}, redisSecret: "rel-sluice-redis", createdURL: "redis://redis:6379", bounds: defaultBounds},
		{name: "everything", set: []string{"redis.existingSecret=redis-auth", "autoscaling.enabled=true", "serviceMonitor.enabled=true", "adminToken.existingSecret=sluice-admin", "failureMode=local", "redis.minTTL=1m",
			"bounds.maxKeys=2000000", "bounds.denyCacheBytes=0", "bounds.maxReservations=10", "bounds.rlqsMaxStreams=20000", "bounds.rlqsMaxBucketsPerStream=7", "bounds.maxConnections=-1"},
			redisSecret: "redis-auth", options: true, bounds: map[string]string{
				"SLUICE_MAX_KEYS": "2000000", "SLUICE_DENY_CACHE_BYTES": "0", "SLUICE_MAX_RESERVATIONS": "10",
				"SLUICE_RLQS_MAX_STREAMS": "20000", "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM": "7", "SLUICE_MAX_CONNECTIONS": "-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.set...)
			d := r.deployment
			if d == nil || r.service == nil || r.configMap == nil || r.pdb == nil {
				t.Fatalf("rendered %v; want a Deployment, Service, ConfigMap and PodDisruptionBudget", r.kinds)
			}
			pod := d.Spec.Template
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			if len(c.Args) == 0 || c.Args[0] != "serve" || !slices.Contains(c.Args, "--config=/etc/sluice") {
				t.Errorf("args %v, want serve --config=/etc/sluice ...", c.Args)
			}

			// Ports: container, probes and Service agree.
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if ports["http"] != 8080 || ports["grpc"] != 8081 || !slices.Contains(c.Args, "--http=:8080") || !slices.Contains(c.Args, "--grpc=:8081") {
				t.Errorf("container ports %v and args %v, want http 8080 and grpc 8081, listened on", ports, c.Args)
			}
			for _, pr := range []struct {
				kind  string
				probe *corev1.Probe
				path  string
			}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
				if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port.String() != "http" {
					t.Errorf("%s probe %+v, want GET %s on port http", pr.kind, pr.probe, pr.path)
				}
			}
			svcPorts := map[string]corev1.ServicePort{}
			for _, p := range r.service.Spec.Ports {
				svcPorts[p.Name] = p
			}
			if p := svcPorts["http"]; p.Port != 8080 || p.TargetPort.String() != "http" {
				t.Errorf("Service port http %+v, want 8080 -> http", p)
			}
			if p := svcPorts["grpc"]; p.Port != 8081 || p.TargetPort.String() != "grpc" {
				t.Errorf("Service port grpc %+v, want 8081 -> grpc", p)
			}
			for name, sel := range map[string]map[string]string{"Service": r.service.Spec.Selector, "Deployment": d.Spec.Selector.MatchLabels, "PodDisruptionBudget": r.pdb.Spec.Selector.MatchLabels} {
				if len(sel) == 0 || !selects(sel, pod.Labels) {
					t.Errorf("%s selector %v does not select the pods %v", name, sel, pod.Labels)
				}
			}
			if r.pdb.Spec.MaxUnavailable == nil && r.pdb.Spec.MinAvailable == nil {
				t.Error("the PodDisruptionBudget allows nothing and forbids nothing")
			}

			// Security: non-root (the image's 65532), read-only, no capabilities.
			psc, sc := pod.Spec.SecurityContext, c.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
				t.Errorf("pod securityContext %+v, want runAsNonRoot and runAsUser 65532", psc)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("container securityContext %+v, want readOnlyRootFilesystem, no privilege escalation, drop ALL", sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v, want CPU and memory requests and a memory limit", c.Resources)
			}

			// The configuration: the ConfigMap as a directory, and sluice loads it.
			var mount *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].MountPath == "/etc/sluice" {
					mount = &c.VolumeMounts[i]
				}
			}
			if mount == nil || mount.SubPath != "" {
				t.Fatalf("volume mounts %+v, want /etc/sluice mounted whole (a subPath never sees ConfigMap updates)", c.VolumeMounts)
			}
			var vol *corev1.Volume
			for i := range pod.Spec.Volumes {
				if pod.Spec.Volumes[i].Name == mount.Name {
					vol = &pod.Spec.Volumes[i]
				}
			}
			if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != r.configMap.Name || len(vol.ConfigMap.Items) != 0 {
				t.Errorf("volume %+v, want ConfigMap %s, all of it", vol, r.configMap.Name)
			}
			if _, ok := pod.Annotations["checksum/config"]; ok {
				t.Error("a checksum/config annotation restarts the pods on every configuration change, which sluice reloads in place")
			}
			loadsConfig(t, r.configMap)

			// Environment: every SLUICE_ variable is one serve reads; the Redis URL comes
			// from a Secret.
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
				if strings.HasPrefix(e.Name, "SLUICE_") && !strings.Contains(string(serveHelp), "$"+e.Name) {
					t.Errorf("the Deployment sets %s, which sluice serve --help does not list", e.Name)
				}
			}
			// GOMEMLIMIT keeps the Go runtime under the pod's memory limit.
			if e, ok := env["GOMEMLIMIT"]; !ok {
				t.Error("no GOMEMLIMIT: the runtime does not know the pod's memory limit")
			} else if n, err := byteCount(e.Value); err != nil || n <= 0 || n >= c.Resources.Limits.Memory().Value() {
				t.Errorf("GOMEMLIMIT %q (%d bytes, %v), want below the memory limit %s", e.Value, n, err, c.Resources.Limits.Memory())
			}
			// Each bound of what clients can grow is set as --set says (in decimal: a large
			// number must not render as 2e+06), or left to sluice serve's default.
			for name, want := range tc.bounds {
				if e, ok := env[name]; ok != (want != "") || e.Value != want {
					t.Errorf("%s %+v (set: %v), want %q", name, e, ok, want)
				}
			}
			redisURL, ok := env["SLUICE_REDIS_URL"]
			switch {
			case tc.redisSecret == "" && ok:
				t.Errorf("SLUICE_REDIS_URL set without a Redis: %+v", redisURL)
			case tc.redisSecret != "" && (!ok || redisURL.Value != "" || redisURL.ValueFrom == nil || redisURL.ValueFrom.SecretKeyRef == nil ||
				redisURL.ValueFrom.SecretKeyRef.Name != tc.redisSecret || redisURL.ValueFrom.SecretKeyRef.Key != "redis-url"):
				t.Errorf("SLUICE_REDIS_URL %+v, want it from Secret %s, key redis-url", redisURL, tc.redisSecret)
			}
			if tc.createdURL != "" {
				s := r.secrets[tc.redisSecret]
				if s == nil || s.StringData["redis-url"] != tc.createdURL {
					t.Errorf("Secret %s %+v, want redis-url %s", tc.redisSecret, s, tc.createdURL)
				}
			} else if len(r.secrets) != 0 {
				t.Errorf("rendered Secrets %v with no redis.url", slices.Collect(maps.Keys(r.secrets)))
			}

			if !tc.options {
				if r.hpa != nil || r.serviceMonitor != nil {
					t.Errorf("rendered %v; the HPA and ServiceMonitor are off by default", r.kinds)
				}
				if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
					t.Errorf("replicas %v, want at least 2 by default (one may be disrupted)", d.Spec.Replicas)
				}
				return
			}
			if r.hpa == nil || r.hpa.Spec.ScaleTargetRef.Kind != "Deployment" || r.hpa.Spec.ScaleTargetRef.Name != d.Name {
				t.Errorf("HPA %+v, want one scaling Deployment %s", r.hpa, d.Name)
			}
			if d.Spec.Replicas != nil {
				t.Errorf("replicas %d with an HPA: each helm upgrade would undo its scaling", *d.Spec.Replicas)
			}
			sm := fmt.Sprint(r.serviceMonitor["spec"])
			if r.serviceMonitor == nil || !strings.Contains(sm, "port:http") || !strings.Contains(sm, "path:/metrics") {
				t.Errorf("ServiceMonitor spec %s, want an endpoint on port http, path /metrics", sm)
			}
			if smSel, _ := r.serviceMonitor["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any); !selects(stringMap(smSel), r.service.Labels) {
				t.Errorf("ServiceMonitor selector %v does not select the Service %v", smSel, r.service.Labels)
			}
			if e := env["SLUICE_ADMIN_TOKEN_FILE"]; !strings.HasPrefix(e.Value, "/var/run/secrets/sluice/") {
				t.Errorf("SLUICE_ADMIN_TOKEN_FILE %+v, want a file of the mounted admin token Secret", e)
			}
			if e := env["SLUICE_FAILURE_MODE"]; e.Value != "local" {
				t.Errorf("SLUICE_FAILURE_MODE %+v, want local", e)
			}
			if e := env["SLUICE_REDIS_MIN_TTL"]; e.Value != "1m" {
				t.Errorf("SLUICE_REDIS_MIN_TTL %+v, want 1m", e)
			}
		})
	}
}

// loadsConfig writes the ConfigMap's files to a directory as the kubelet mounts them (a
// ..data link to a hidden version directory, and a visible link per file), checks that
// sluice serve starts on it, then updates the ConfigMap as the kubelet does (a new version
// directory, ..data swapped to it by a rename, a link for the new file) and checks that
// sluice reloads it in place.
func loadsConfig(t *testing.T, cm *corev1.ConfigMap) {
	t.Helper()
	dir := t.TempDir()
	writeVersion := func(name string, data map[string]string) {
		t.Helper()
		version := filepath.Join(dir, name)
		if err := os.Mkdir(version, 0o755); err != nil {
			t.Fatal(err)
		}
		for file, content := range data {
			if err := os.WriteFile(filepath.Join(version, file), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// ..data_tmp -> version, renamed over ..data: the kubelet's atomic swap.
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for file := range data {
			link := filepath.Join(dir, file)
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join("..data", file), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeVersion("..2026_01_01_00_00_00.000000001", cm.Data)
	s := sluicetest.StartServe(t, sluiceBin, "--config", dir)
	if code := s.Check(t, `{"policy":"api","key":"203.0.113.7"}`); code != 200 {
		t.Errorf("the chart's default policy api: /v1/check answered %d, want 200", code)
	}
	const probe = `{"policy":"reload-probe","key":"203.0.113.7"}`
	if code := s.Check(t, probe); code == 200 {
		t.Fatalf("policy reload-probe answered 200 before it was configured")
	}
	next := maps.Clone(cm.Data)
	next["reload-probe.yaml"] = "policies:\n  - {name: reload-probe, algorithm: gcra, rate: 1, period: second, key: ip}\n"
	writeVersion("..2026_01_01_00_01_00.000000002", next)
	deadline := time.Now().Add(20 * time.Second)
	for s.Check(t, probe) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("20s after the ConfigMap's ..data swap, sluice still does not know the new policy: not reloaded in place")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func stringMap(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// sluiceBin is the sluice binary TestMain builds from the main module.
var sluiceBin string

func TestMain(m *testing.M) { sluicetest.Main(m, filepath.Join("..", "..", ".."), &sluiceBin) }

// byteCount parses a GOMEMLIMIT value as the Go runtime does: a number of bytes with an
// optional unit B, KiB, MiB, GiB or TiB.
func byteCount(s string) (int64, error) {
	units := []struct {
		suffix string
		n      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}
