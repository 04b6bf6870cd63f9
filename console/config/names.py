"""The two name patterns every surface checks against: one home for each.

``NAME_RE``: a cloud resource name (TPU node, zone-less cluster, JobSet, node pool): an RFC 1035
label, lower-case letters, digits and hyphens, starting with a letter and not ending with a
hyphen. Length limits differ by resource and are checked where the resource is known.

``ENV_NAME_RE``: an environment variable's name, as POSIX shells accept it (letters, digits and
underscores, not starting with a digit). Secrets travel as ``$NAME`` references of this shape.
"""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
