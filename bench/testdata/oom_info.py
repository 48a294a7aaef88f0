# oom_info.py, verbatim from the investigation notes of the first incident
# (shared/seeds/001): prints every process with its oom_score, as a tree.
import re
import shlex
from argparse import ArgumentParser
from dataclasses import dataclass
from pathlib import Path

argp = ArgumentParser()
_ = argp.add_argument("--extended", action="store_true")

args = argp.parse_args()

pid_re = re.compile(r"^\d+$")
status_line_re = re.compile(r"^(?P<key>[^:]+):\s*(?P<val>.*)$")


@dataclass(kw_only=True)
class Proc:
    pid: int
    ppid: int
    status: dict[str, str]
    cmd_line: list[str]
    comm: str
    oom_score: int
    oom_score_adj: int


data: dict[int, Proc] = {}
child_procs: dict[int, list[int]] = {}

proc_p = Path("/proc/")
for x in proc_p.iterdir():
    if pid_re.match(x.name) is None:
        continue

    pid = int(x.name)

    try:
        status_str = (x / "status").read_text()
        cmd_line = (part.strip() for part in (x / "cmdline").read_text().split("\0"))
        comm = (x / "comm").read_text().strip()
        oom_score = int((x / "oom_score").read_text())
        oom_score_adj = int((x / "oom_score_adj").read_text())
    except (NotADirectoryError, FileNotFoundError):
        continue

    status: dict[str, str] = {}
    for l in status_str.split("\n"):
        l = l.strip()
        if l == "":
            continue

        m = status_line_re.match(l)
        if m is None:
            raise RuntimeError(f"could not match /proc/{{pid}}/status line: {l!r}")
        status[m.group("key")] = m.group("val")

    ppid = int(status["PPid"])
    data[pid] = Proc(
        pid=pid,
        ppid=ppid,
        status=status,
        cmd_line=[x for x in cmd_line if x != ""],
        comm=comm,
        oom_score=oom_score,
        oom_score_adj=oom_score_adj,
    )
    child_procs.setdefault(ppid, []).append(pid)

for xs in child_procs.values():
    xs.sort()

# print(child_procs)


def render(pid: int, *, indent: str = "") -> None:
    x = data[pid]
    if x.comm == "kthread" and x.ppid == 1:
        return

    cmd_line = " ".join(shlex.quote(x) for x in x.cmd_line)

    if args.extended:
        print(f"{indent}[{x.pid}] {x.comm}")
        print(f"{indent}  {cmd_line}")
        print(f"{indent}  {x.oom_score} ({x.oom_score_adj:+})")
    else:
        print(f"{indent}[{x.pid}] {x.comm}: {x.oom_score} ({x.oom_score_adj:+})")

    for c in child_procs.get(pid, []):
        render(c, indent=indent + "  ")


render(1)
