#!/usr/bin/env bash
# Installs what the `--executor slurm` tests start as a one-node cluster (tests/support/slurm_cluster.py):
# Debian's slurmctld, slurmd, slurm-client (22.05 on bookworm) and munge. The tests run their own daemons on
# private ports and a private munge socket, so nothing here is configured or started.
# Idempotent: does nothing when the daemons and client commands are present. Needs root or sudo for apt-get;
# where it cannot install (no apt-get, no root), it says so and succeeds: the Slurm tests then skip with the reason.
set -euo pipefail
TOOLS=(munged slurmctld slurmd sbatch squeue sacct scancel scontrol sinfo srun)
missing=()
for tool in "${TOOLS[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "slurm: present ($(slurmd -V 2>/dev/null || /usr/sbin/slurmd -V 2>/dev/null || echo "version unknown"))"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "slurm: ${missing[*]} missing and this user cannot apt-get install them; the Slurm tests will skip" >&2
        echo "       (as root: apt-get install slurmctld slurmd slurm-client munge)" >&2
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "slurm: ${missing[*]} missing and no apt-get here; install Slurm (slurmctld, slurmd, client commands) and" >&2
    echo "       munge to run the Slurm tests; they skip until then" >&2
    exit 0
fi
echo "slurm: installing Debian slurmctld slurmd slurm-client munge (apt-get)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge
/usr/sbin/slurmd -V 2>/dev/null || slurmd -V
