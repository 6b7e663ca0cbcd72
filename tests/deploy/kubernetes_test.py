#!/usr/bin/env python3
"""Renders deploy/kubernetes's base and overlays with `kubectl kustomize` (no cluster needed)
and checks the objects: that every reference resolves, selectors match, the coordinator is
probed through gRPC health, and each overlay sets workers up for its kind of device.

  kubernetes_test.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:
    print("kubernetes_test: PyYAML is missing (Debian package python3-yaml)", file=sys.stderr)
    sys.exit(1)

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
NAMESPACE = "fsdpd"
CLUSTER_SCOPED = {"Namespace"}


def kustomize(directory):
    result = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(objects, kind, name=None, prefix=None):
    matches = [o for o in objects if o["kind"] == kind and
               (name is None or o["metadata"]["name"] == name) and
               (prefix is None or o["metadata"]["name"].startswith(prefix))]
    return matches


def one(objects, kind, name=None, prefix=None):
    matches = find(objects, kind, name, prefix)
    if len(matches) != 1:
        raise AssertionError(f"expected one {kind} {name or prefix or ''}, found {len(matches)}")
    return matches[0]


def container(workload, name):
    for candidate in workload["spec"]["template"]["spec"]["containers"]:
        if candidate["name"] == name:
            return candidate
    raise AssertionError(f"{workload['metadata']['name']} has no container {name}")


def selects(selector, labels):
    return all(labels.get(key) == value for key, value in selector.items())


def problems(objects):
    """Everything wrong with a rendered set of objects that any overlay must get right."""
    found = []
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] not in CLUSTER_SCOPED and obj["metadata"].get("namespace") != NAMESPACE:
            found.append(f"{where} is not in namespace {NAMESPACE}")
        if obj["kind"] not in ("StatefulSet", "DaemonSet"):
            continue
        pod = obj["spec"]["template"]
        if not selects(obj["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]):
            found.append(f"{where}: selector does not match its pod labels")
        spec = pod["spec"]
        if not spec.get("securityContext", {}).get("runAsNonRoot"):
            found.append(f"{where}: pods may run as root")
        claims = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            if ":" not in c["image"].rsplit("/", 1)[-1]:
                found.append(f"{where}: image {c['image']} has no tag")
            context = c.get("securityContext", {})
            if context.get("allowPrivilegeEscalation") is not False:
                found.append(f"{where}/{c['name']}: privilege escalation is allowed")
            if context.get("capabilities", {}).get("drop") != ["ALL"]:
                found.append(f"{where}/{c['name']}: capabilities are not all dropped")
            for source in c.get("envFrom", []):
                ref = source.get("configMapRef") or source.get("secretRef")
                kind = "ConfigMap" if "configMapRef" in source else "Secret"
                if (kind, ref["name"]) not in names:
                    found.append(f"{where}: envFrom names missing {kind} {ref['name']}")
            for mount in c.get("volumeMounts", []):
                if mount["name"] not in volumes and mount["name"] not in claims:
                    found.append(f"{where}: mount {mount['name']} has no volume")
        for volume in volumes.values():
            for key, kind, field in (("configMap", "ConfigMap", "name"),
                                     ("secret", "Secret", "secretName"),
                                     ("persistentVolumeClaim", "PersistentVolumeClaim",
                                      "claimName")):
                if key in volume and (kind, volume[key][field]) not in names:
                    found.append(f"{where}: volume {volume['name']} names missing {kind} "
                                 f"{volume[key][field]}")
    for service in find(objects, "Service"):
        selector = service["spec"]["selector"]
        pods = [o for o in objects if o["kind"] in ("StatefulSet", "DaemonSet") and
                selects(selector, o["spec"]["template"]["metadata"]["labels"])]
        if not pods:
            found.append(f"Service/{service['metadata']['name']} selects no pods")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort")
            container_ports = {p.get("name") for o in pods
                               for c in o["spec"]["template"]["spec"]["containers"]
                               for p in c.get("ports", [])}
            if isinstance(target, str) and target not in container_ports:
                found.append(f"Service/{service['metadata']['name']}: targetPort {target} is "
                             "not a container port")
    for monitor in find(objects, "ServiceMonitor"):
        labels = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in find(objects, "Service") if selects(labels, s["metadata"]["labels"])]
        if len(services) != 1:
            found.append(f"ServiceMonitor selects {len(services)} services, not one (double "
                         "scrapes or none)")
        for endpoint in monitor["spec"]["endpoints"]:
            if not any(endpoint["port"] == p["name"] for s in services for p in s["spec"]["ports"]):
                found.append(f"ServiceMonitor port {endpoint['port']} is not on its service")
            if not endpoint.get("honorLabels"):
                found.append("ServiceMonitor must honor labels (fsdpd's own `job` label)")
    return found


class RenderedChecks:
    """Checks shared by the base and every overlay (a mixin, so it is not run on its own)."""
    directory = None

    @classmethod
    def setUpClass(cls):
        cls.objects = kustomize(os.path.join(SOURCE_DIR, "deploy/kubernetes", cls.directory))

    def test_objects_are_consistent(self):
        self.assertEqual(problems(self.objects), [])

    def test_coordinator_is_one_stateful_replica_probed_by_grpc_health(self):
        coordinator = one(self.objects, "StatefulSet", "fsdpd")
        self.assertEqual(coordinator["spec"]["replicas"], 1)
        headless = one(self.objects, "Service", coordinator["spec"]["serviceName"])
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        claims = {t["metadata"]["name"]: t for t in coordinator["spec"]["volumeClaimTemplates"]}
        self.assertEqual(claims["state"]["spec"]["accessModes"], ["ReadWriteOnce"])
        fsdpd = container(coordinator, "fsdpd")
        state_mount = [m for m in fsdpd["volumeMounts"] if m["name"] == "state"]
        self.assertEqual(len(state_mount), 1)
        config = self.config()
        self.assertEqual(state_mount[0]["mountPath"], config["FSDPD_STATE_DIR"])
        ports = {p["name"]: p["containerPort"] for p in fsdpd["ports"]}
        self.assertEqual(ports, {"grpc": 7070, "metrics": 7071, "health": 7072})
        # The gRPC port speaks mutual TLS, which kubelet probes cannot: they use the health port.
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(fsdpd[probe].get("grpc", {}).get("port"), 7072, probe)
        args = fsdpd.get("args", [])
        self.assertIn("--health-listen=0.0.0.0:7072", args)
        for flag in ("--tls-cert=", "--tls-key=", "--tls-client-ca=", "--tokens-file="):
            self.assertTrue(any(a.startswith(flag) for a in args), flag)
        self.assertNotIn("--insecure", args)
        self.assertTrue(config["FSDPD_LISTEN"].endswith(":7070"))
        self.assertTrue(config["FSDPD_METRICS_LISTEN"].endswith(":7071"))

    def test_workers_reach_the_coordinator_service(self):
        host, port = self.config()["FSDPD_COORDINATOR"].split(":")
        service = one(self.objects, "Service", host)
        self.assertIn(int(port), [p["port"] for p in service["spec"]["ports"]])
        self.assertNotEqual(service["spec"].get("clusterIP"), "None")

    def test_worker_runs_the_entrypoint_from_its_config_map(self):
        workers = one(self.objects, "DaemonSet", "fsdpd-worker")
        worker = container(workers, "worker")
        script = worker["command"][-1]
        mount = [m for m in worker["volumeMounts"] if script.startswith(m["mountPath"] + "/")]
        self.assertEqual(len(mount), 1, f"nothing mounted where {script} lives")
        volume = [v for v in workers["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == mount[0]["name"]][0]
        config_map = one(self.objects, "ConfigMap", volume["configMap"]["name"])
        with open(os.path.join(SOURCE_DIR, "deploy/kubernetes/base/worker-entrypoint.sh"),
                  encoding="utf-8") as file:
            self.assertEqual(config_map["data"][os.path.basename(script)], file.read())
        env = {e["name"]: e for e in worker.get("env", [])}
        self.assertEqual(env["FSDPD_WORKER_HOSTNAME"]["valueFrom"]["fieldRef"]["fieldPath"],
                         "spec.nodeName")
        self.assertEqual(env["FSDPD_WORKER_ADDRESS"]["valueFrom"]["fieldRef"]["fieldPath"],
                         "status.podIP")
        checkpoints = [m for m in worker["volumeMounts"]
                       if m["mountPath"] == self.config()["FSDPD_CHECKPOINT_ROOT"]]
        self.assertEqual(len(checkpoints), 1, "the checkpoint root is not a mounted volume")
        data = [m for m in worker["volumeMounts"]
                if m["mountPath"] == self.config()["FSDPD_ALLOWED_ROOT"]]
        self.assertEqual(len(data), 1, "the workers' allowed root is not a mounted volume")
        # Workers present their client certificate to the coordinator.
        tls = {m["mountPath"] for m in worker["volumeMounts"] if m["name"] == "tls"}
        for variable in ("FSDPD_TLS_CA", "FSDPD_TLS_CERT", "FSDPD_TLS_KEY"):
            self.assertTrue(any(env[variable]["value"].startswith(p + "/") for p in tls),
                            variable)

    def test_secret_holds_tls_and_token_placeholders(self):
        secret = one(self.objects, "Secret", "fsdpd-tls")
        data = secret.get("stringData", secret.get("data", {}))
        self.assertEqual(set(data), {"tls.crt", "tls.key", "ca.crt", "tokens"})
        worker = one(self.objects, "Secret", "fsdpd-worker-tls")
        data = worker.get("stringData", worker.get("data", {}))
        self.assertEqual(set(data), {"tls.crt", "tls.key", "ca.crt"})

    def config(self):
        return one(self.objects, "ConfigMap", prefix="fsdpd-config-")["data"]

    def worker_gpus(self):
        worker = container(one(self.objects, "DaemonSet", "fsdpd-worker"), "worker")
        return worker["resources"].get("limits", {}).get("nvidia.com/gpu")

    def gpu_affinity(self):
        spec = one(self.objects, "DaemonSet", "fsdpd-worker")["spec"]["template"]["spec"]
        terms = (spec.get("affinity") or {}).get("nodeAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
        return [e for t in terms for e in t.get("matchExpressions", [])
                if e["key"] == "nvidia.com/gpu.present"]


class BaseTest(RenderedChecks, unittest.TestCase):
    directory = "base"

    def test_workers_ask_for_a_gpu_on_gpu_nodes(self):
        self.assertEqual(self.worker_gpus(), 1)
        self.assertEqual(len(self.gpu_affinity()), 1)
        self.assertEqual(self.config()["FSDPD_WORKER_DEVICES"], "auto")


class DevOverlayTest(RenderedChecks, unittest.TestCase):
    directory = "overlays/dev"

    def test_workers_are_cpu_only_on_any_node(self):
        self.assertIsNone(self.worker_gpus())
        self.assertEqual(self.gpu_affinity(), [])
        devices = self.config()["FSDPD_WORKER_DEVICES"].replace(",", " ").split()
        self.assertGreaterEqual(len(devices), 2)
        self.assertTrue(all(d == "cpu" for d in devices), devices)

    def test_needs_no_operator_and_no_shared_storage(self):
        self.assertEqual(find(self.objects, "ServiceMonitor"), [])
        self.assertEqual(find(self.objects, "PersistentVolumeClaim"), [])


class ProductionOverlayTest(RenderedChecks, unittest.TestCase):
    directory = "overlays/production"

    def test_workers_hold_every_gpu_of_their_node(self):
        self.assertEqual(self.worker_gpus(), 8)
        self.assertEqual(len(self.gpu_affinity()), 1)
        self.assertEqual(self.config()["FSDPD_WORKER_DEVICES"], "auto")

    def test_checkpoints_are_shared_and_metrics_scraped(self):
        claim = one(self.objects, "PersistentVolumeClaim", "fsdpd-checkpoints")
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteMany"])
        self.assertEqual(len(find(self.objects, "ServiceMonitor")), 1)

    def test_images_come_from_a_registry(self):
        for workload in find(self.objects, "StatefulSet") + find(self.objects, "DaemonSet"):
            for c in workload["spec"]["template"]["spec"]["containers"]:
                self.assertIn("/", c["image"])


class ChecksCanFailTest(unittest.TestCase):
    """An overlay with known mistakes must be reported, so the checks above can fail."""

    def test_broken_overlay_is_reported(self):
        with tempfile.TemporaryDirectory() as directory:
            base = os.path.join(SOURCE_DIR, "deploy/kubernetes/base")
            shutil.copytree(base, os.path.join(directory, "base"))
            overlay = os.path.join(directory, "broken")
            os.mkdir(overlay)
            with open(os.path.join(overlay, "kustomization.yaml"), "w", encoding="utf-8") as f:
                f.write("""resources: [../base]
patches:
  - patch: |-
      apiVersion: v1
      kind: Service
      metadata: {name: fsdpd}
      spec:
        selector: {app.kubernetes.io/component: coordinatr}
  - patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: fsdpd-worker}
      spec:
        template:
          spec:
            volumes:
              - name: entrypoint
                configMap: {name: no-such-config-map}
""")
            found = problems(kustomize(overlay))
        self.assertTrue(any("Service/fsdpd selects no pods" in p for p in found), found)
        self.assertTrue(any("no-such-config-map" in p for p in found), found)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SOURCE_DIR = sys.argv.pop(1)
    if shutil.which("kubectl") is None:
        print("kubernetes_test: kubectl not found", file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
