"""Regenerate ``data/jobset-v1alpha2.schema.json`` from the JobSet CRD (run by hand).

    python -m emulators.gke.schema_gen path/to/jobset.x-k8s.io_jobsets.yaml [COMMIT]

The CRD is ``config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml`` of
github.com/kubernetes-sigs/jobset. Its ``openAPIV3Schema`` is the structural schema the
API server validates and prunes JobSets with; it embeds JobSpec and PodSpec (with their
upstream descriptions), which the emulator reuses for Jobs and Pods. The emulator reads
the data file only, never the network.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).with_name("data") / "jobset-v1alpha2.schema.json"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    crd = yaml.safe_load(Path(argv[0]).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    doc = {
        "source": "github.com/kubernetes-sigs/jobset config/components/crd/bases/"
        "jobset.x-k8s.io_jobsets.yaml" + (f" @ {argv[1]}" if len(argv) > 1 else ""),
        "openAPIV3Schema": version["schema"]["openAPIV3Schema"],
    }
    OUT.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
