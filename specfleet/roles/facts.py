"""Read-only facts about a host: OS, kernel, IPv4 addresses, routes, GPU."""
from __future__ import annotations

import re

from specfleet.step import Facts, Step

ADDR_RE = re.compile(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/(\d+)")
SECTION = "@@section "


class HostFacts(Step):
    """Changes nothing; reports facts. Used by `fab facts` and by the duplicate-IP check."""

    name = "gather facts"

    def probe(self) -> str:
        return (
            f"echo '{SECTION}os'; . /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\"; "
            f"echo '{SECTION}kernel'; uname -r; "
            f"echo '{SECTION}hostname'; hostname; "
            f"echo '{SECTION}addr'; ip -o -4 addr show; "
            f"echo '{SECTION}route'; ip -o -4 route show table main; "
            f"echo '{SECTION}gpu'; nvidia-smi --query-gpu=name,memory.used,memory.total "
            f"--format=csv,noheader,nounits 2>&1 | head -n 4; echo \"@rc=$?\""
        )

    def report(self, facts: Facts) -> dict:
        return parse_host_facts(facts.stdout)


def parse_host_facts(text: str) -> dict:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(SECTION):
            current = line[len(SECTION):].strip()
            sections[current] = []
        elif current and line.strip():
            sections[current].append(line.rstrip())
    addresses = []
    for line in sections.get("addr", []):
        m = ADDR_RE.match(line)
        if m:
            addresses.append({"iface": m.group(1).split("@")[0], "ip": m.group(2),
                              "cidr": f"{m.group(2)}/{m.group(3)}"})
    gpu_lines = [ln for ln in sections.get("gpu", []) if not ln.startswith("@rc=")]
    gpu = "; ".join(gpu_lines) if gpu_lines else "-"
    if any("couldn't communicate" in ln or "not found" in ln for ln in gpu_lines):
        gpu = "NOT VISIBLE: " + gpu_lines[0][:80]
    return {
        "os": (sections.get("os") or ["?"])[0],
        "kernel": (sections.get("kernel") or ["?"])[0],
        "hostname": (sections.get("hostname") or ["?"])[0],
        "addresses": addresses,
        "routes": sections.get("route", []),
        "gpu": gpu,
    }
