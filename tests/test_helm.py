"""The Helm chart, rendered and linted with Helm's own Go library (helm-python-sdk, no binary).

Every manifest of several value combinations is validated against the Kubernetes OpenAPI
schemas (kubernetes-validate) for the oldest supported and the newest known Kubernetes; the
Prometheus Operator objects (ServiceMonitor, PrometheusRule) against structural schemas here.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from monitor.config import env_name

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "rag-monitor"
RELEASE, NAMESPACE = "ragmon", "observability"
FULLNAME = "ragmon-rag-monitor"
CONFIG_PATH = "/etc/rag-monitor/config.yaml"
KUBE_VERSIONS = ("1.25", kubernetes_validate.latest_version())

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus"}},
        "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kube-prometheus"}},
        "alerts": {"additionalLabels": {"team": "search"}},
    },
    "existing-secret": {
        "secrets": {"existingSecret": "ragmon-credentials", "keys": {"judgeApiKey": "openai"}},
    },
    "chart-secret": {
        "secrets": {
            "judgeApiKey": "sk-test-not-a-real-key",
            "kafkaSaslPassword": "kafka-pass",
            "storeUrl": "postgresql+asyncpg://ragmon:pw@postgres:5432/ragmon",
        },
        "config": {
            "kafka": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "ragmon",
            }
        },
    },
    "golden-cronjobs": {
        "goldenCronJobs": {
            "enabled": True,
            "suites": [
                {"name": "retrieval-ja", "schedule": "17 3 * * *"},
                {
                    "name": "faq",
                    "schedule": "*/30 * * * *",
                    "suspend": True,
                    "extraArgs": ["--report", "/tmp/faq.md"],
                },
            ],
        }
    },
    "resources-and-scale": {
        "replicaCount": 3,
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
        "podDisruptionBudget": {"minAvailable": 2},
        "persistence": {"existingClaim": "ragmon-data"},
        "config": {"shutdown": {"deadline_seconds": 45}, "http": {"port": 9900}},
        "env": [{"name": "RAGMON_LOG__LEVEL", "value": "debug"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
        "dashboards": {"reviewUrl": "https://ragmon.example.com/"},
    },
}


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return manifests


def objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    found = []
    for path, text in render(values).items():
        if path.endswith("NOTES.txt"):
            continue
        found += [doc for doc in yaml.safe_load_all(text) if doc]
    return found


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matching = [o for o in objs if o["kind"] == kind]
    assert len(matching) == 1, f"{len(matching)} {kind} objects"
    return matching[0]


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    spec: dict[str, Any] = pod["containers"][0]
    return spec


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    name: str = request.param
    yield name, objects(CASES[name])


# --- lint and schema validation -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_lint_is_clean(name: str) -> None:
    report = helm.lint(str(CHART), CASES[name], strict=True, kube_version="v1.30.0")
    assert report["errors"] == [], report
    serious = [m for m in report["messages"] if m["severity"] >= 2]
    assert serious == [], serious


def test_values_schema_rejects_bad_values() -> None:
    with helm.Chart.load(str(CHART)) as chart:
        assert chart.schema is not None
        chart.validate_schema({})
        for bad in (
            {"replicaCount": "three"},
            {"alerts": {"faithfulness": {"threshold": 1.5}}},
            {"alerts": {"quality": {"for": "fifteen minutes"}}},
            {"goldenCronJobs": {"suites": [{"name": "Not_DNS", "schedule": "0 3 * * *"}]}},
            {"unknownTopLevelKey": True},
        ):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


def test_manifests_validate_against_kubernetes_schemas(
    case: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = case
    assert objs, name
    for obj in objs:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{name}: {obj['kind']} {path}: {exc.message} (Kubernetes {version})")


def test_every_object_has_the_standard_labels(case: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = case
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "rag-monitor"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["helm.sh/chart"] == "rag-monitor-0.1.0"
        assert obj["metadata"]["namespace"] == NAMESPACE


# --- the Deployment -------------------------------------------------------------------------------


def test_pod_runs_non_root_with_a_read_only_root_filesystem(
    case: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objs = case
    pods = [one(objs, "Deployment")["spec"]["template"]["spec"]]
    pods += [
        c["spec"]["jobTemplate"]["spec"]["template"]["spec"] for c in objs if c["kind"] == "CronJob"
    ]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        for spec in pod["containers"]:
            security = spec["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            mounts = {m["mountPath"]: m for m in spec["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            # The only writable places: /tmp and the data directory (the working directory).
            assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
            data = volumes[mounts["/var/lib/rag-monitor"]["name"]]
            assert "emptyDir" in data or "persistentVolumeClaim" in data
            assert spec["workingDir"] == "/var/lib/rag-monitor"
            assert mounts["/etc/rag-monitor"]["readOnly"] is True


def test_probes_and_ports() -> None:
    objs = objects()
    spec = container(objs)
    assert spec["ports"] == [{"name": "http", "containerPort": 9820, "protocol": "TCP"}]
    assert spec["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert spec["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert spec["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    startup = spec["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60
    service = one(objs, "Service")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 9820, "targetPort": "http", "protocol": "TCP"}
    ]
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # The container port follows the daemon's configured http.port.
    moved = container(objects({"config": {"http": {"port": 9900}}}))
    assert moved["ports"][0]["containerPort"] == 9900


def test_config_is_mounted_and_passed_with_a_checksum_annotation() -> None:
    objs = objects()
    spec = container(objs)
    assert spec["args"] == ["run", "--config", CONFIG_PATH]
    configmap = next(
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == FULLNAME
    )
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config["http"]["port"] == 9820
    assert config["shutdown"]["deadline_seconds"] == 20
    annotations = one(objs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    before = annotations["checksum/config"]
    assert len(before) == 64
    changed = objects({"config": {"log": {"level": "debug"}}})
    after = one(changed, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert after["checksum/config"] != before
    # A chart-managed Secret also rolls the pods when it changes.
    rotated = objects({"secrets": {"judgeApiKey": "sk-new"}})
    assert (
        one(rotated, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
        != annotations["checksum/secret"]
    )


@pytest.mark.parametrize(
    ("values", "grace"),
    [
        ({}, 30),
        ({"config": {"shutdown": {"deadline_seconds": 45}}}, 55),
        ({"config": {"shutdown": {"deadline_seconds": 7.5}}}, 18),
        ({"env": [{"name": "RAGMON_SHUTDOWN__DEADLINE_SECONDS", "value": "60"}]}, 70),
        ({"terminationGracePeriodSeconds": 90}, 90),
    ],
)
def test_termination_grace_period_outlasts_the_shutdown_deadline(
    values: dict[str, Any], grace: int
) -> None:
    pod = one(objects(values), "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace


def test_a_grace_period_shorter_than_the_deadline_is_refused() -> None:
    with pytest.raises(helm.HelmRenderError, match="longer than the shutdown deadline"):
        render({"terminationGracePeriodSeconds": 20})


def test_resources_and_scaling_values_reach_the_pod() -> None:
    objs = objects(CASES["resources-and-scale"])
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    spec = container(objs)
    assert spec["resources"] == CASES["resources-and-scale"]["resources"]
    assert container(objects())["resources"]["limits"]["memory"] == "1Gi"
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]
    assert one(objects(), "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "ragmon-data"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["terminationGracePeriodSeconds"] == 55


# --- secrets --------------------------------------------------------------------------------------

SECRET_ENV = {
    "RAGMON_JUDGE__API_KEY": "judge.api_key",
    "RAGMON_KAFKA__SASL_PASSWORD": "kafka.sasl_password",
    "RAGMON_STORE__URL": "store.url",
}


def secret_refs(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container(objs)["env"]
        if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
    }


def test_secret_env_names_follow_the_configuration_interface() -> None:
    for variable, key in SECRET_ENV.items():
        assert env_name(key) == variable
    assert set(secret_refs(objects())) == set(SECRET_ENV)


def test_chart_managed_secret() -> None:
    objs = objects(CASES["chart-secret"])
    secret = one(objs, "Secret")
    assert secret["metadata"]["name"] == FULLNAME
    import base64

    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {
        "judge-api-key": "sk-test-not-a-real-key",
        "kafka-sasl-password": "kafka-pass",
        "store-url": "postgresql+asyncpg://ragmon:pw@postgres:5432/ragmon",
    }
    refs = secret_refs(objs)
    assert refs["RAGMON_STORE__URL"] == {"name": FULLNAME, "key": "store-url", "optional": True}
    # Secrets never land in the ConfigMap.
    rendered = "\n".join(render(CASES["chart-secret"]).values())
    configmap_text = rendered.split("kind: Secret")[0]
    assert "sk-test-not-a-real-key" not in configmap_text
    # With no secret values the Secret is empty and every reference optional.
    assert one(objects(), "Secret")["data"] == {}
    assert all(ref["optional"] for ref in secret_refs(objects()).values())


def test_existing_secret() -> None:
    objs = objects(CASES["existing-secret"])
    assert not [o for o in objs if o["kind"] == "Secret"]
    refs = secret_refs(objs)
    assert {ref["name"] for ref in refs.values()} == {"ragmon-credentials"}
    assert refs["RAGMON_JUDGE__API_KEY"]["key"] == "openai"
    assert refs["RAGMON_KAFKA__SASL_PASSWORD"]["key"] == "kafka-sasl-password"
    annotations = one(objs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/secret" not in annotations and "checksum/config" in annotations


# --- the daemon accepts what the chart gives it ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["defaults", "chart-secret", "resources-and-scale"])
def test_rendered_config_passes_rag_monitor_check_config(name: str, tmp_path: Path) -> None:
    objs = objects(CASES[name])
    configmap = next(
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == FULLNAME
    )
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    for entry in container(objs)["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
    if name == "chart-secret":  # what the Secret provides
        env["RAGMON_KAFKA__SASL_PASSWORD"] = "kafka-pass"
        env["RAGMON_STORE__URL"] = CASES[name]["secrets"]["storeUrl"]
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "check-config", "--config", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    effective = yaml.safe_load(result.stdout)
    assert effective["http"]["port"] == configmap_port(objs)
    assert "kafka-pass" not in result.stdout and "ragmon:pw" not in result.stdout


def configmap_port(objs: list[dict[str, Any]]) -> int:
    port: int = container(objs)["ports"][0]["containerPort"]
    return port


# --- monitoring objects ---------------------------------------------------------------------------


def test_service_monitor_and_prometheus_rule_are_optional_with_additional_labels() -> None:
    kinds = {o["kind"] for o in objects()}
    assert "ServiceMonitor" not in kinds and "PrometheusRule" not in kinds
    objs = objects(CASES["monitoring"])
    monitor = one(objs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    service = one(objs, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    # jobLabel makes the job "rag-monitor", which the daemon-down alert selects by default.
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "rag-monitor"
    rule = one(objs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and all(a["labels"]["team"] == "search" for a in alerts)
    assert any(
        r["alert"] == "RagmonDaemonDown" and 'job="rag-monitor"' in r["expr"] for r in alerts
    )


def test_dashboard_configmaps_carry_the_committed_dashboards() -> None:
    maps = [
        o for o in objects() if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]
    ]
    committed = {p.name: p.read_text() for p in (ROOT / "dashboards").glob("*.json")}
    assert len(maps) == len(committed) == 4
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((key, text),) = cm["data"].items()
        name = key.removeprefix("rag-monitor-")
        assert json.loads(text) == json.loads(committed[name])
    # dashboards.reviewUrl becomes the default of the review_url variable.
    custom = [
        o
        for o in objects(CASES["resources-and-scale"])
        if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]
    ]
    for cm in custom:
        board = json.loads(next(iter(cm["data"].values())))
        variable = next(v for v in board["templating"]["list"] if v["name"] == "review_url")
        assert variable["query"] == "https://ragmon.example.com"
    assert not [
        o
        for o in objects({"dashboards": {"enabled": False}})
        if "-dashboard-" in o["metadata"]["name"]
    ]


def test_golden_cronjobs() -> None:
    assert not [o for o in objects() if o["kind"] == "CronJob"]
    objs = objects(CASES["golden-cronjobs"])
    jobs = {o["metadata"]["labels"]["rag-monitor/suite"]: o for o in objs if o["kind"] == "CronJob"}
    assert set(jobs) == {"retrieval-ja", "faq"}
    ja = jobs["retrieval-ja"]["spec"]
    assert ja["schedule"] == "17 3 * * *"
    assert ja["concurrencyPolicy"] == "Forbid"
    assert ja["suspend"] is False
    pod = ja["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (spec,) = pod["containers"]
    assert spec["args"] == ["golden", "run", "retrieval-ja", "--config", CONFIG_PATH]
    assert set(secret_refs_of(spec)) == set(SECRET_ENV)
    faq = jobs["faq"]["spec"]
    assert faq["suspend"] is True
    faq_args = faq["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert faq_args == ["golden", "run", "faq", "--config", CONFIG_PATH, "--report", "/tmp/faq.md"]


def test_service_and_pdb_select_only_the_daemon_pods() -> None:
    objs = objects(CASES["golden-cronjobs"])
    daemon = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selectors = [
        one(objs, "Service")["spec"]["selector"],
        one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        one(objs, "Deployment")["spec"]["selector"]["matchLabels"],
    ]
    for cronjob in (o for o in objs if o["kind"] == "CronJob"):
        golden = cronjob["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        for selector in selectors:
            assert selector.items() <= daemon.items()
            assert not selector.items() <= golden.items(), "a golden job pod would be selected"


def secret_refs_of(spec: dict[str, Any]) -> list[str]:
    return [e["name"] for e in spec["env"] if "secretKeyRef" in e.get("valueFrom", {})]


def test_notes_render() -> None:
    notes = render(CASES["monitoring"])["rag-monitor/templates/NOTES.txt"]
    assert f"svc/{FULLNAME} 9820:9820" in notes
    assert "/review" in notes and "PrometheusRule" in notes
    warning = render({"replicaCount": 2})["rag-monitor/templates/NOTES.txt"]
    assert "PostgreSQL" in warning


# --- structural schemas of the Prometheus Operator objects ----------------------------------------

_STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
_DURATION = {
    "type": "string",
    "pattern": (
        r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
    ),
}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace", "labels"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": _STRMAP,
    },
}
_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
    "properties": {
        "record": {"type": "string"},
        "alert": {"type": "string"},
        "expr": {"type": "string", "minLength": 1},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": _STRMAP,
        "annotations": _STRMAP,
    },
}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "interval": _DURATION,
                                "rules": {"type": "array", "minItems": 1, "items": _RULE},
                            },
                        },
                    }
                },
            },
        },
    },
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "jobLabel": {"type": "string"},
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": _STRMAP},
                        "additionalProperties": False,
                    },
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                            "any": {"type": "boolean"},
                        },
                        "additionalProperties": False,
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["port"],
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string", "pattern": "^/"},
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                                "relabelings": {"type": "array", "items": {"type": "object"}},
                                "metricRelabelings": {"type": "array", "items": {"type": "object"}},
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_structural_crd_schemas_reject_mistakes() -> None:
    rule = one(objects(CASES["monitoring"]), "PrometheusRule")
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["exp"] = "typo"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, CRD_SCHEMAS["PrometheusRule"])
    monitor = one(objects(CASES["monitoring"]), "ServiceMonitor")
    broken = copy.deepcopy(monitor)
    broken["spec"]["endpoints"][0]["interval"] = "thirty seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, CRD_SCHEMAS["ServiceMonitor"])


def _daemon_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    configmap = next(
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == FULLNAME
    )
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    return config


def test_single_replica_mode_follows_the_replica_count() -> None:
    """One replica assembles OTLP in the process and rolls out by Recreate (never two pods in
    the group); several share it through the internal topics and roll as usual; turning the
    mode on for several replicas fails the render."""
    one_pod = objects()
    assert _daemon_config(one_pod)["kafka"]["single_replica"] is True
    assert one(one_pod, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    three = objects({"replicaCount": 3})
    assert _daemon_config(three)["kafka"]["single_replica"] is False
    assert "strategy" not in one(three, "Deployment")["spec"]
    off = objects({"config": {"kafka": {"single_replica": False}}})
    assert _daemon_config(off)["kafka"]["single_replica"] is False
    assert "strategy" not in one(off, "Deployment")["spec"]
    with pytest.raises(Exception, match="single_replica is true with replicaCount 2"):
        render({"replicaCount": 2, "config": {"kafka": {"single_replica": True}}})
