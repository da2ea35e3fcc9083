#!/usr/bin/env bash
# A shadow of $CUDA_HOME whose ptxas is another release's (a same-run comparison of two ptxas versions):
#   scripts/ptxas_shadow.sh PTXAS DIR     then compile with DIR/bin/nvcc (scripts/variants_gpu.sh: a variant
#                                         token NVCC=DIR/bin/nvcc)
# PTXAS: e.g. ptxas 12.8 from the registry's nvidia-cuda-nvcc-cu12==12.8.93 wheel (nvidia/cuda_nvcc/bin/ptxas).
# Everything in DIR links to $CUDA_HOME but bin/, whose files link to $CUDA_HOME/bin but nvcc and
# nvcc.profile (copies: nvcc finds its tools next to the path it was started from) and ptxas, a wrapper
# that lowers the PTX ISA version nvcc 13 writes (9.0) to one the older ptxas reads (PTX_VERSION, default
# 8.7; fine while the PTX uses nothing newer) and runs PTXAS on that copy, deleted afterwards.
# PTXAS may be that wheel itself (pip download --no-deps nvidia-cuda-nvcc-cu12==12.8.93 -d .whl): its ptxas is
# extracted to DIR.ptxas.
set -euo pipefail
ptxas=$(readlink -f "$1"); dir=$2; cuda=${CUDA_HOME:-/usr/local/cuda}
if [[ "$ptxas" == *.whl ]]; then
  python3 - "$ptxas" "$dir.ptxas" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("nvidia/cuda_nvcc/bin/ptxas") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  chmod +x "$dir.ptxas"; ptxas=$(readlink -f "$dir.ptxas")
fi
rm -rf "$dir" && mkdir -p "$dir/bin"
for f in "$cuda"/*; do [ "$(basename "$f")" = bin ] || ln -s "$(readlink -f "$f")" "$dir/$(basename "$f")"; done
for f in "$cuda"/bin/*; do ln -s "$(readlink -f "$f")" "$dir/bin/$(basename "$f")"; done
rm -f "$dir/bin/nvcc" "$dir/bin/nvcc.profile" "$dir/bin/ptxas"
cp "$(readlink -f "$cuda/bin/nvcc")" "$dir/bin/nvcc" && cp "$(readlink -f "$cuda/bin/nvcc.profile")" "$dir/bin/nvcc.profile"
cat > "$dir/bin/ptxas" <<WRAP
#!/usr/bin/env bash
# ptxas wrapper (scripts/ptxas_shadow.sh): $ptxas on a copy of the PTX with its .version lowered.
args=(); tmps=()
trap 'rm -f "\${tmps[@]}"' EXIT
for a in "\$@"; do
  if [[ "\$a" == *.ptx && -f "\$a" ]]; then
    tmp=\$(mktemp --suffix=.ptx); tmps+=("\$tmp")
    sed -E 's/^\.version [0-9]+\.[0-9]+/.version ${PTX_VERSION:-8.7}/' "\$a" > "\$tmp"; args+=("\$tmp")
  else
    args+=("\$a")
  fi
done
"$ptxas" "\${args[@]}"
WRAP
chmod +x "$dir/bin/ptxas"
"$dir/bin/ptxas" --version | tail -1
