#!/usr/bin/env python3
"""Checks the deployment files in deploy/ and prints what it checked.

    python3 -m venv /tmp/dv && /tmp/dv/bin/pip install kubernetes-validate envoy-data-plane
    /tmp/dv/bin/python deploy/validate.py

- Kubernetes: every manifest in deploy/kubernetes/ against the Kubernetes OpenAPI schemas
  bundled by kubernetes-validate (strict: unknown fields are errors), for each version in
  KUBE_VERSIONS (default: 1.29 and the newest the package bundles); then what the manifests
  rely on between them (ports, names, labels, the timing of the drain, resources against
  --workers and --memory-limit).
- Envoy: deploy/envoy.yaml parsed with PyYAML and its structure checked (listener, HTTP
  connection manager, route timeouts, HTTP/2 upstream, DNS name, health checks); read as an
  Envoy v3 Bootstrap with envoy-data-plane when it is installed (field names, enum values,
  durations, typed_config types). Full validation needs the envoy binary:
  `envoy --mode validate` runs when ENVOY or PATH has one.
- NGINX: `nginx -t` on deploy/nginx.conf when NGINX or PATH has an nginx binary, and the
  directives gRPC streams need.
- Dockerfile: what it copies exists, and the binary it copies is the one Cargo builds.
- Penstock: with PENSTOCK_BIN set to a penstock binary, the pipeline in configmap.yaml is
  checked with `penstock check`, and every flag the Deployment passes to `penstock run` is
  looked up in `penstock run --help`.

Exits 1 when a check fails; checks that cannot run (no binary) are reported as skipped.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

try:
    import yaml
except ImportError:
    sys.exit("validate.py needs PyYAML: pip install kubernetes-validate (brings it) or pyyaml")

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
KUBE_DIR = DEPLOY / "kubernetes"
# The namespace the manifests are applied to (docs/deploy.md), part of Envoy's DNS name.
NAMESPACE = "telemetry"


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def check(self, condition: bool, what: str, detail: str = "") -> bool:
        if condition:
            self.passed += 1
            print(f"  ok    {what}")
        else:
            self.failed += 1
            print(f"  FAIL  {what}" + (f": {detail}" if detail else ""))
        return condition

    def skip(self, what: str, why: str) -> None:
        self.skipped += 1
        print(f"  skip  {what}: {why}")

    def section(self, title: str) -> None:
        print(f"\n== {title}")


def size_bytes(text: str) -> int:
    """'896MiB', '1Gi', '2GiB', '512M' or a number of bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[kmgt]B?|B)?\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r}")
    number, unit = float(m.group(1)), (m.group(2) or "B")
    binary = "i" in unit
    power = {"B": 0, "K": 1, "M": 2, "G": 3, "T": 4}[unit[0].upper()]
    return int(number * (1024 if binary else 1000) ** power)


def cpu_cores(text: str) -> float:
    text = str(text)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def seconds(text: str) -> float:
    """'30s', '10m', '1h', '500ms', '600s' (Envoy, Penstock and NGINX durations)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", str(text).strip())
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    factor = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    return float(m.group(1)) * factor


def load_manifests() -> dict[str, list[dict]]:
    return {
        path.name: [d for d in yaml.safe_load_all(path.read_text()) if d]
        for path in sorted(KUBE_DIR.glob("*.yaml"))
    }


def one(manifests: dict[str, list[dict]], kind: str, name: str | None = None) -> dict:
    found = [
        d for docs in manifests.values() for d in docs
        if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
    ]
    if len(found) != 1:
        raise LookupError(f"expected one {kind}{' ' + name if name else ''}, found {len(found)}")
    return found[0]


def run_flags(args: list[str]) -> dict[str, str]:
    """The --flag value pairs of `penstock run` arguments."""
    flags = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and i + 1 < len(args):
            flags[arg] = args[i + 1]
    return flags


# ---------------------------------------------------------------------------- Kubernetes

def check_kubernetes_schemas(report: Report, manifests: dict[str, list[dict]]) -> None:
    report.section("Kubernetes manifests against the OpenAPI schemas (kubernetes-validate, strict)")
    try:
        import kubernetes_validate
        from kubernetes_validate import utils as kv_utils
        from kubernetes_validate import version as kv_version
    except ImportError:
        report.check(False, "kubernetes-validate is installed",
                     "pip install kubernetes-validate (in a virtual environment)")
        return
    latest = kv_utils.latest_version()
    versions = os.environ.get("KUBE_VERSIONS", f"1.29.0,{latest}").split(",")
    print(f"  kubernetes-validate {kv_version.__version__} bundles Kubernetes {kv_utils.all_versions()[0]}"
          f" to {latest}; validating against {', '.join(versions)}")
    for filename, docs in manifests.items():
        for doc in docs:
            for version in versions:
                what = f"{filename}: {doc['kind']}/{doc['metadata']['name']} is valid Kubernetes {version}"
                try:
                    kubernetes_validate.validate(doc, version.strip(), strict=True)
                    report.check(True, what)
                except kubernetes_validate.ValidationError as e:
                    path = ".".join(str(p) for p in e.path)
                    report.check(False, what, f"{path}: {e.message}")
                except Exception as e:  # schema not found, unsupported version
                    report.check(False, what, getattr(e, "message", str(e)))


def check_kubernetes_consistency(report: Report, manifests: dict[str, list[dict]]) -> dict:
    """What the manifests rely on between them. Returns facts the other checks use."""
    report.section("Kubernetes manifests against each other")
    facts: dict = {}
    try:
        deployment = one(manifests, "Deployment")
        configmap = one(manifests, "ConfigMap")
        hpa = one(manifests, "HorizontalPodAutoscaler")
        services = [d for docs in manifests.values() for d in docs if d.get("kind") == "Service"]
    except LookupError as e:
        report.check(False, "the manifests define a Deployment, ConfigMap, Services and HPA", str(e))
        return facts
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    container = pod["containers"][0]
    args = container.get("args", [])
    flags = run_flags(args)
    facts["args"] = args
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}

    report.check(args[:1] == ["run"], "the container runs `penstock run`", f"args {args[:1]}")
    report.check(deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(),
                 "the Deployment's selector matches its pod labels")

    # The pipeline file: the ConfigMap's key, mounted where `run` reads it.
    sql_key = "pipeline.sql"
    sql = configmap.get("data", {}).get(sql_key, "")
    facts["sql"] = sql
    volume = next((v for v in pod.get("volumes", []) if "configMap" in v), None)
    mount = next((m for m in container.get("volumeMounts", [])
                  if volume and m["name"] == volume["name"]), None)
    report.check(volume is not None and volume["configMap"]["name"] == configmap["metadata"]["name"],
                 f"the pod mounts ConfigMap {configmap['metadata']['name']}")
    if mount:
        path = f"{mount['mountPath'].rstrip('/')}/{sql_key}"
        report.check(args[-1:] == [path], f"`penstock run` reads the mounted file {path}",
                     f"last argument {args[-1:]}")

    # Ports: the pipeline's GRPC source and --admin-listen are the container's ports.
    listen = re.search(r"FROM\s+GRPC\s+WITH\s*\(\s*listen\s*=\s*'([^']+)'", sql, re.I)
    grpc_port = int(listen.group(1).rsplit(":", 1)[1]) if listen else None
    report.check(listen is not None and listen.group(1).startswith("0.0.0.0:"),
                 "the GRPC source listens on all interfaces (0.0.0.0)",
                 listen.group(1) if listen else "no GRPC source")
    report.check(grpc_port == ports.get("grpc"),
                 f"the GRPC source's port {grpc_port} is the container port 'grpc'", str(ports))
    admin = flags.get("--admin-listen", "")
    admin_port = int(admin.rsplit(":", 1)[1]) if ":" in admin else None
    report.check(admin.startswith("0.0.0.0:") and admin_port == ports.get("admin"),
                 f"--admin-listen {admin} is the container port 'admin'", str(ports))
    facts["grpc_port"], facts["admin_port"] = grpc_port, admin_port

    for probe in ("readinessProbe", "livenessProbe"):
        get = container.get(probe, {}).get("httpGet", {})
        report.check(get.get("path") == "/healthz" and get.get("port") in ("admin", admin_port),
                     f"{probe} is GET /healthz on the admin port", str(get))

    # Resources against --workers and --memory-limit.
    limits = container["resources"]["limits"]
    requests = container["resources"]["requests"]
    workers = int(flags.get("--workers", "0"))
    report.check(workers >= 1 and workers == cpu_cores(limits["cpu"]),
                 f"--workers {workers} equals the CPU limit {limits['cpu']}")
    memory_limit = size_bytes(flags.get("--memory-limit", "0"))
    container_memory = size_bytes(limits["memory"])
    report.check(0.75 * container_memory <= memory_limit < container_memory,
                 f"--memory-limit {flags.get('--memory-limit')} is 75-100% of the container's {limits['memory']}")
    report.check("cpu" in requests, "the container requests CPU (the HPA's utilization is relative to it)")

    # Shutdown: the grace period covers the preStop sleep and the whole drain.
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    command = pre_stop.get("exec", {}).get("command", [])
    sleep = float(command[1]) if command[:1] == ["sleep"] and len(command) == 2 else \
        float(pre_stop.get("sleep", {}).get("seconds", 0))
    drain = seconds(flags.get("--drain-timeout", "30s"))
    grace = pod.get("terminationGracePeriodSeconds", 30)
    report.check(sleep >= 5, f"a preStop sleep ({sleep:g}s) lets endpoints go before SIGTERM")
    report.check(grace > sleep + drain,
                 f"terminationGracePeriodSeconds {grace} > preStop {sleep:g}s + drain {drain:g}s")

    # Services.
    container_port_names = set(ports)
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    report.check(len(headless) == 1, "one headless Service (clusterIP: None) for Envoy")
    report.check(any(s["spec"].get("type", "ClusterIP") == "ClusterIP" and s["spec"].get("clusterIP") != "None"
                     for s in services), "one ClusterIP Service for clients")
    for service in services:
        name = service["metadata"]["name"]
        report.check(service["spec"]["selector"].items() <= labels.items(),
                     f"Service {name} selects the Deployment's pods")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            report.check(target in container_port_names or target in ports.values(),
                         f"Service {name} port {port['port']} targets container port {target}")
    facts["headless"] = headless[0]["metadata"]["name"] if headless else None

    # Autoscaler.
    target = hpa["spec"]["scaleTargetRef"]
    report.check(target["kind"] == "Deployment" and target["name"] == deployment["metadata"]["name"],
                 f"the HPA scales Deployment {target['name']}")
    report.check("replicas" not in deployment["spec"],
                 "the Deployment leaves spec.replicas to the HPA")
    return facts


# ---------------------------------------------------------------------------------- Envoy

def check_envoy(report: Report, facts: dict) -> None:
    report.section("deploy/envoy.yaml (PyYAML: the structure the fleet relies on)")
    path = DEPLOY / "envoy.yaml"
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        report.check(False, "envoy.yaml is YAML", str(e))
        return
    resources = config.get("static_resources", {})
    clusters = {c["name"]: c for c in resources.get("clusters", [])}
    listeners = resources.get("listeners", [])
    grpc_port = facts.get("grpc_port", 4317)
    listener = next((l for l in listeners
                     if l["address"]["socket_address"].get("port_value") == 4317), None)
    if not report.check(listener is not None, "a listener on port 4317"):
        return
    hcm = next((f for chain in listener["filter_chains"] for f in chain["filters"]
                if f["name"] == "envoy.filters.network.http_connection_manager"), None)
    if not report.check(hcm is not None, "the listener runs the HTTP connection manager"):
        return
    typed = hcm["typed_config"]
    report.check(typed.get("@type", "").endswith(
        "http_connection_manager.v3.HttpConnectionManager"), "its typed_config is the v3 HttpConnectionManager")
    report.check(typed.get("codec_type", "AUTO") in ("AUTO", "HTTP2"),
                 "it accepts HTTP/2 in clear text (codec_type AUTO or HTTP2)")
    idle = typed.get("stream_idle_timeout")
    report.check(idle is not None and seconds(idle) >= 300,
                 f"stream_idle_timeout is set, at least 5 minutes ({idle})")
    filters = typed.get("http_filters", [])
    report.check(bool(filters) and filters[-1]["name"] == "envoy.filters.http.router",
                 "the router is the last HTTP filter")
    routes = [r for vh in typed["route_config"]["virtual_hosts"] for r in vh["routes"]]
    report.check(bool(routes), "the route configuration has routes")
    for route in routes:
        action = route.get("route", {})
        report.check(action.get("cluster") in clusters,
                     f"route {route['match']} goes to a defined cluster ({action.get('cluster')})")
        report.check(str(action.get("timeout")) == "0s",
                     f"route {route['match']} has timeout 0s (streams are not cut)", str(action.get("timeout")))
    for name, cluster in clusters.items():
        report.check(cluster.get("type") in ("STRICT_DNS", "LOGICAL_DNS", "EDS"),
                     f"cluster {name} discovers the gateways ({cluster.get('type')})")
        report.check(cluster.get("lb_policy", "ROUND_ROBIN") in ("ROUND_ROBIN", "LEAST_REQUEST"),
                     f"cluster {name} balances by {cluster.get('lb_policy', 'ROUND_ROBIN')}")
        options = cluster.get("typed_extension_protocol_options", {}).get(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", {})
        report.check(options.get("@type", "").endswith("upstreams.http.v3.HttpProtocolOptions")
                     and isinstance(options.get("explicit_http_config", {}).get("http2_protocol_options"), dict),
                     f"cluster {name} speaks HTTP/2 to the gateways (explicit http2_protocol_options)")
        endpoints = [e["endpoint"] for group in cluster["load_assignment"]["endpoints"]
                     for e in group["lb_endpoints"]]
        for endpoint in endpoints:
            address = endpoint["address"]["socket_address"]
            if facts.get("headless"):
                expected = f"{facts['headless']}.{NAMESPACE}.svc.cluster.local"
                report.check(address["address"] == expected,
                             f"cluster {name} resolves the headless Service {expected}", address["address"])
            report.check(address["port_value"] == grpc_port,
                         f"cluster {name} sends to the gateways' gRPC port {grpc_port}")
            hc_port = endpoint.get("health_check_config", {}).get("port_value")
            if cluster.get("health_checks"):
                report.check(hc_port == facts.get("admin_port", hc_port),
                             f"cluster {name} health-checks the admin port {hc_port}")
        for hc in cluster.get("health_checks", []):
            report.check(hc.get("http_health_check", {}).get("path") == "/healthz",
                         f"cluster {name} health checks GET /healthz")
    check_envoy_protos(report, config)
    envoy = os.environ.get("ENVOY") or shutil.which("envoy")
    if envoy:
        result = subprocess.run([envoy, "--mode", "validate", "-c", str(path)],
                                capture_output=True, text=True)
        print((result.stdout + result.stderr).strip())
        report.check(result.returncode == 0, "`envoy --mode validate` accepts envoy.yaml")
    else:
        report.skip("full Envoy validation (envoy --mode validate)",
                    "no envoy binary (set ENVOY or put envoy on PATH)")


def check_envoy_protos(report: Report, config: dict) -> None:
    """envoy.yaml read as an Envoy v3 Bootstrap message with envoy-data-plane (Envoy's API
    protos as Python classes): unknown fields, enum values, durations and typed_config types
    are errors. Envoy's own validation rules (required fields, ranges) are not checked."""
    try:
        from importlib.metadata import version
        from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap
    except ImportError:
        report.skip("envoy.yaml against Envoy's API protos", "pip install envoy-data-plane")
        return
    # typed_config messages are only known once the module defining them is imported.
    types = set(re.findall(r"type\.googleapis\.com/([\w.]+)", yaml.safe_dump(config)))
    for name in sorted(types):
        module = "envoy_data_plane." + name.rsplit(".", 1)[0]
        try:
            importlib.import_module(module)
        except ImportError:
            report.check(False, f"typed_config type {name} exists in Envoy's API")
    try:
        Bootstrap.from_dict(config)
        report.check(True, f"envoy.yaml is an Envoy v3 Bootstrap (envoy-data-plane "
                           f"{version('envoy-data-plane')}: fields, enums, durations, {len(types)} typed_config types)")
    except Exception as e:
        report.check(False, "envoy.yaml is an Envoy v3 Bootstrap (envoy-data-plane)", f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------- NGINX

def check_nginx(report: Report) -> None:
    report.section("deploy/nginx.conf")
    path = DEPLOY / "nginx.conf"
    text = re.sub(r"#[^\n]*", "", path.read_text())

    def directive(name: str) -> list[str]:
        return [m.group(1).strip() for m in re.finditer(rf"(?m)^\s*{name}\s+([^;]*);", text)]

    report.check(any("grpc://" in v for v in directive("grpc_pass")), "grpc_pass grpc://UPSTREAM")
    report.check(any("http2" in v for v in directive("listen")) or "on" in directive("http2"),
                 "the listener speaks HTTP/2")
    report.check(directive("client_max_body_size") == ["0"],
                 "client_max_body_size 0 (a stream is one request body)")
    for name in ("client_body_timeout", "grpc_read_timeout", "grpc_send_timeout"):
        values = directive(name)
        report.check(len(values) == 1 and seconds(values[0]) >= 300,
                     f"{name} is at least 5 minutes ({values})")
    report.check(bool(directive("keepalive")), "the upstream keeps idle connections (keepalive)")
    nginx = os.environ.get("NGINX") or shutil.which("nginx")
    if not nginx:
        report.skip("nginx -t", "no nginx binary (set NGINX or put nginx on PATH)")
        return
    with tempfile.TemporaryDirectory() as prefix:
        result = subprocess.run([nginx, "-t", "-c", str(path), "-p", prefix + "/"],
                                capture_output=True, text=True)
    print("  " + (result.stdout + result.stderr).strip().replace("\n", "\n  "))
    report.check(result.returncode == 0, f"`nginx -t -c deploy/nginx.conf` ({nginx})")


# ----------------------------------------------------------------------------- Dockerfile

def check_dockerfile(report: Report) -> None:
    report.section("deploy/Dockerfile")
    text = (DEPLOY / "Dockerfile").read_text()
    bins = tomllib.loads((ROOT / "server" / "Cargo.toml").read_text()).get("bin", [])
    binary = bins[0]["name"] if bins else "penstock-server"
    report.check("cargo build --release -p penstock-server --locked" in text,
                 "it builds penstock-server with cargo build --release --locked")
    report.check(f"target/release/{binary} " in text,
                 f"it copies target/release/{binary}, the binary server/Cargo.toml names")
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not parts[1].startswith("--"):
            for source in parts[1:-1]:
                report.check((ROOT / source).exists(), f"COPY source {source} exists in the repository")


# -------------------------------------------------------------------------------- Penstock

def check_penstock(report: Report, facts: dict) -> None:
    report.section("the pipeline and flags against a penstock binary (PENSTOCK_BIN)")
    binary = os.environ.get("PENSTOCK_BIN")
    if not binary:
        report.skip("penstock check of configmap.yaml's pipeline", "PENSTOCK_BIN is not set")
        report.skip("the Deployment's flags in `penstock run --help`", "PENSTOCK_BIN is not set")
        return
    if not facts.get("sql"):
        report.check(False, "configmap.yaml holds pipeline.sql")
        return
    version = subprocess.run([binary, "--version"], capture_output=True, text=True)
    print(f"  {binary}: {version.stdout.strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        sql = Path(tmp) / "pipeline.sql"
        sql.write_text(facts["sql"])
        result = subprocess.run([binary, "check", str(sql)], capture_output=True, text=True)
    print("  " + (result.stdout + result.stderr).strip().replace("\n", "\n  "))
    report.check(result.returncode == 0, "`penstock check` accepts the pipeline in configmap.yaml")
    for tier in sorted((DEPLOY / "two-tier").glob("*.sql")):
        result = subprocess.run([binary, "check", str(tier)], capture_output=True, text=True)
        report.check(result.returncode == 0, f"`penstock check` accepts two-tier/{tier.name}",
                     (result.stdout + result.stderr).strip())
    help_text = subprocess.run([binary, "run", "--help"], capture_output=True, text=True).stdout
    known = set(re.findall(r"--[a-z][a-z-]*", help_text))
    for flag in (a for a in facts.get("args", []) if a.startswith("--")):
        report.check(flag in known, f"`penstock run` has the flag {flag}")


def main() -> int:
    report = Report()
    manifests = load_manifests()
    print(f"manifests: {', '.join(manifests)}")
    check_kubernetes_schemas(report, manifests)
    facts = check_kubernetes_consistency(report, manifests)
    check_envoy(report, facts)
    check_nginx(report)
    check_dockerfile(report)
    check_penstock(report, facts)
    print(f"\n{report.passed} passed, {report.failed} failed, {report.skipped} skipped")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
