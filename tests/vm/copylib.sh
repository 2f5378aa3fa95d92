# Copies binaries with their shared libraries into a root directory $root (sourced by build-initramfs.sh and
# tests/k8s/build-images.sh).
copy_lib() { mkdir -p "$root$(dirname "$1")"; cp -L "$1" "$root$1"; }
copy_bin() { # copy_bin SRC DST: a binary (or shared object) and its shared libraries
  local src=$1 dst=$2
  mkdir -p "$root$(dirname "$dst")"; cp -L "$src" "$root$dst"
  { ldd "$src" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
    copy_lib "$lib"
  done
}
# glibc dlopens libgcc_s.so.1 when a thread exits (ldd does not list it). awk reads ldconfig's whole output: an
# early exit would SIGPIPE ldconfig, which under pipefail fails the build without a word.
copy_libgcc_s() {
  local gcc_s
  gcc_s=$(ldconfig -p | awk '$1 == "libgcc_s.so.1" && /x86-64/ && !f { print $NF; f = 1 }')
  copy_lib "${gcc_s:-/lib/x86_64-linux-gnu/libgcc_s.so.1}"
}
