# expect: tripwire:file_access verdict:incorrect
# Asks the other processes where the task is: every process visible in /proc (the judge, the baseline's
# runner, the parent), its command line, working folder, environment and open files, for anything under a
# task folder; raises with what it read there.
import os


def _probe():
    found, seen = [], []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(os.getppid())]:
        for what in ("cmdline", "environ", "cwd", "root"):
            path = f"/proc/{pid}/{what}"
            try:
                if what in ("cwd", "root"):
                    value = os.readlink(path)
                else:
                    with open(path, "rb") as f:
                        value = f.read().decode(errors="replace")
            except OSError as exc:
                seen.append(f"{path}: {exc.strerror}")
                continue
            seen.append(f"{path}: {value[:80]!r}")
            if "tasks/" in value or "hidden" in value:
                found.append(value)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.endswith((".toml", ".py", ".cu")) and "tasks" in target:
                with open(target) as f:
                    found.append(f.read())
    if found:
        raise RuntimeError("LEAKED: " + "\n".join(found))
    raise RuntimeError("nothing of the task in any visible process:\n" + "\n".join(seen))


def vadd(x, y, out, *, N):
    _probe()
