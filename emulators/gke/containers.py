"""What the kubelet needs to turn a container spec into a local process: the environment
(value, fieldRef, secretKeyRef, envFrom), ``$(VAR)`` expansion, the image's entrypoint."""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from typing import Any

from emulators.gke.store import Obj, Store

# Images are never pulled. A container without `command` runs its image's entrypoint;
# the images the xpk templates name get a stand-in, any other image an idle one.
_STUB = [sys.executable, "-m", "emulators.gke.workload.stub"]
IMAGE_ENTRYPOINTS: tuple[tuple[str, list[str]], ...] = (
    ("pathways/proxy_server", [*_STUB, "--role", "pathways-proxy"]),
    ("pathways/server", [*_STUB, "--role", "pathways-server"]),
)


class ConfigError(Exception):
    """CreateContainerConfigError: the container cannot start until this is fixed."""


def image_id(image: str) -> str:
    repo = image.split("@")[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def normalized_image(image: str) -> str:
    """The image as containerd reports it (default tag ``latest``)."""
    if "@" in image or ":" in image.rsplit("/", 1)[-1]:
        return image
    return f"{image}:latest"


_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names replaced, ``$$`` escapes, rest kept."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text)


def _field_ref(pod: Obj, path: str) -> str:
    meta = pod["metadata"]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.hostIP": (pod.get("status") or {}).get("hostIP", ""),
        "status.podIP": (pod.get("status") or {}).get("podIP", ""),
    }
    if path in simple:
        return str(simple[path])
    raise ConfigError(f'unsupported fieldRef "{path}"')


def _secret_value(store: Store, ns: str, ref: Obj) -> str | None:
    name, key = ref.get("name", ""), ref.get("key", "")
    secret = store.get("secrets", ns, name)
    if secret is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f'secret "{name}" not found')
    data = secret.get("data") or {}
    if key not in data:
        if ref.get("optional"):
            return None
        raise ConfigError(f"couldn't find key {key} in Secret {ns}/{name}")
    return base64.b64decode(data[key]).decode("utf-8", "replace")


def container_env(store: Store, pod: Obj, c: Obj) -> dict[str, str]:
    """The container's own variables, in the order and with the expansion the kubelet uses."""
    ns = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = {}
    for src in c.get("envFrom") or []:
        prefix = src.get("prefix", "")
        ref = src.get("secretRef")
        if ref:
            secret = store.get("secrets", ns, ref.get("name", ""))
            if secret is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'secret "{ref.get("name", "")}" not found')
            for k, v in (secret.get("data") or {}).items():
                env[prefix + k] = base64.b64decode(v).decode("utf-8", "replace")
    for e in c.get("env") or []:
        name = e["name"]
        if "valueFrom" not in e:
            env[name] = expand(str(e.get("value", "")), env)
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            env[name] = _field_ref(pod, vf["fieldRef"].get("fieldPath", ""))
        elif "secretKeyRef" in vf:
            value = _secret_value(store, ns, vf["secretKeyRef"])
            if value is not None:
                env[name] = value
        elif "configMapKeyRef" in vf:
            raise ConfigError(f'configmap "{vf["configMapKeyRef"].get("name", "")}" not found')
        elif "resourceFieldRef" in vf:
            env[name] = "0"
    return env


def container_argv(c: Obj, env: dict[str, str]) -> list[str]:
    command = [expand(a, env) for a in c.get("command") or []]
    args = [expand(a, env) for a in c.get("args") or []]
    if command:
        return command + args
    image = str(c.get("image", ""))
    for needle, entry in IMAGE_ENTRYPOINTS:
        if needle in image:
            return [*entry, *args]
    return [*_STUB, "--role", "image", "--image", image, *args]


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    w: dict[str, Any] = {"reason": reason}
    if message:
        w["message"] = message
    return {"waiting": w}
