#!/usr/bin/env bash
# Brings into the cache, once, what the emulated SR-IOV machine needs:
#  - on the host: QEMU >= 8 from bookworm-backports (installed), and the tools the initramfs copies
#    (busybox-static, kmod, cpio, iproute2, RDMA userspace: rdma-core, ibverbs-utils, ibverbs-providers,
#    perftest, rdmacm-utils; iperf3);
#  - the kernel named by KERNEL (6.12: bookworm-backports, default; 7: trixie-backports), extracted into
#    $cache/kernel-$KERNEL with its modules under lib/modules.
# apt runs with a private state under $cache/apt/<name>: its own sources list, built from the URI of the
# machine's configured Debian source, its own lists and cache. Nothing under /etc/apt is written.
#   fetch.sh                                    prints the cache directory (last line)
#   fetch.sh apt bookworm|trixie APT-GET-ARGS   apt-get with that private state (cnitool.sh: apt-get source)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHE:-$(cd "$here/../.." && pwd)/.cache/vm}
mkdir -p "$cache"
die() { echo "fetch: $*" >&2; exit 1; }

# The URI of the machine's own `deb` entry for suite $1: apt's parse of its configuration (deb822 and
# one-line alike), else the files themselves. DEBIAN_MIRROR overrides.
configured_uri() {
  local s=$1 u
  u=$(apt-get indextargets --format '$(TARGET_OF) $(RELEASE) $(REPO_URI)' 2>/dev/null \
        | awk -v s="$s" '$1 == "deb" && $2 == s { print $3; exit }') || true
  if [ -z "$u" ]; then
    u=$({
      for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v s="$s" 'BEGIN { RS = ""; FS = "\n" }
          { t = ""; u = ""; su = ""; on = 1
            for (i = 1; i <= NF; i++) {
              l = $i; if (l ~ /^[ \t]*#/) continue
              k = tolower(l); v = l; sub(/^[^:]*:/, "", v)
              if (k ~ /^types:/) t = " " v " "; else if (k ~ /^uris:/) u = v
              else if (k ~ /^suites:/) su = " " v " "; else if (k ~ /^enabled:[ \t]*no/) on = 0
            }
            if (on && t ~ /[ \t]deb[ \t]/ && su ~ ("[ \t]" s "[ \t]")) { split(u, a, " "); print a[1]; exit } }' "$f"
      done
      cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk -v s="$s" '
        $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                      if ($(i + 1) == s) { print $i; exit } }'
    } | head -1) || true
  fi
  echo "${u%/}"
}

# Private apt states: "bookworm" (the host's bookworm suites, bookworm-backports, and bookworm's deb-src),
# "trixie" (trixie-backports only: the 7.x kernel, download only).
state_dir() { echo "$cache/apt/$1"; }
make_state() {
  local name=$1 d uri sec key line
  d=$(state_dir "$name")
  [ -s "$d/sources.list" ] && return 0
  uri=${DEBIAN_MIRROR:-$(configured_uri bookworm)}
  [ -n "$uri" ] || die "no Debian source for bookworm in the apt configuration (set DEBIAN_MIRROR=URI)"
  key=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$key" ] || die "$key missing (apt-get install debian-archive-keyring)"
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  line() { echo "$1 [signed-by=$key] $2 $3 main"; }
  case "$name" in
    bookworm)
      {
        line deb "$uri" bookworm
        line deb-src "$uri" bookworm
        u=$(configured_uri bookworm-updates); [ -n "$u" ] && line deb "$u" bookworm-updates
        sec=$(configured_uri bookworm-security); [ -n "$sec" ] && line deb "$sec" bookworm-security
        line deb "$uri" bookworm-backports
      } > "$d/sources.list.new" ;;
    trixie) line deb "$uri" trixie-backports > "$d/sources.list.new" ;;
    *) die "unknown apt state $name" ;;
  esac
  mv "$d/sources.list.new" "$d/sources.list"
}
papt() { # papt STATE apt-get|apt-cache ARGS...
  local name=$1 tool=$2 d; shift 2
  make_state "$name"; d=$(state_dir "$name")
  if ! { [ "$tool" = apt-get ] && [ "${1:-}" = update ]; } && ! ls "$d/lists/"*_Packages* >/dev/null 2>&1; then
    papt "$name" apt-get update -qq >/dev/null
  fi
  "$tool" -o Dir::Etc::sourcelist="$d/sources.list" -o Dir::Etc::sourceparts=- \
    -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" -o DPkg::Lock::Timeout=300 "$@"
}

if [ "${1:-}" = apt ]; then
  [ $# -ge 3 ] || die "usage: fetch.sh apt bookworm|trixie APT-GET-ARGS..."
  name=$2; shift 2
  papt "$name" apt-get "$@"
  exit
fi

install_pkgs() { # installs the named packages that are missing, from the private bookworm state
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} = 0 ] && return 0
  echo "fetch: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive papt bookworm apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# QEMU >= 8 (igb with SR-IOV) from bookworm-backports. apt-get install reads the private lists; the
# installed packages land in the host's dpkg database as usual.
qv=$(dpkg-query -W -f '${Version}' qemu-system-x86 2>/dev/null || true)
if ! command -v qemu-system-x86_64 >/dev/null || ! dpkg --compare-versions "${qv:-0}" ge 1:8; then
  echo "fetch: installing qemu-system-x86 from bookworm-backports" >&2
  DEBIAN_FRONTEND=noninteractive papt bookworm apt-get install -y -qq -t bookworm-backports qemu-system-x86 >/dev/null
fi
install_pkgs busybox-static kmod cpio xz-utils iproute2 \
  rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils iperf3

# The kernel: the package linux-image-amd64 names in the suite; on trixie it is split into linux-binary-*
# (vmlinuz) and linux-modules-* (modules under usr/lib/modules).
kernel=${KERNEL:-6.12}
case "$kernel" in
  6.12) state=bookworm suite=bookworm-backports re='^linux-image-6\.12\.' ;;
  7) state=trixie suite=trixie-backports re='^linux-image-7\.' ;;
  *) die "KERNEL=$kernel: 6.12 or 7" ;;
esac
kdir=$cache/kernel-$kernel
if [ ! -e "$kdir/boot/vmlinuz" ]; then
  image=$(papt "$state" apt-cache depends -t "$suite" linux-image-amd64 \
            | awk -v re="$re" '!n && $1 == "Depends:" && $2 ~ re { print $2; n = 1 }')
  [ -n "$image" ] || { papt "$state" apt-get update -qq >/dev/null
    image=$(papt "$state" apt-cache depends -t "$suite" linux-image-amd64 \
              | awk -v re="$re" '!n && $1 == "Depends:" && $2 ~ re { print $2; n = 1 }'); }
  [ -n "$image" ] || die "no $re* package in $suite"
  pkgs=("$image")
  while read -r p; do pkgs+=("$p"); done < <(papt "$state" apt-cache depends -t "$suite" "$image" \
    | awk '$1 == "Depends:" && $2 ~ /^linux-(binary|modules)-/ { print $2 }')
  echo "fetch: downloading ${pkgs[*]} ($suite)" >&2
  debs=$cache/deb-$kernel
  rm -rf "$debs" "$kdir.new"; mkdir -p "$debs" "$kdir.new"
  # The _apt sandbox user cannot write into the cache: download as root, said explicitly.
  dl() { papt "$state" apt-get download -qq -o APT::Sandbox::User=root -t "$suite" "${pkgs[@]}"; }
  (cd "$debs" && { dl || { papt "$state" apt-get update -qq && dl; }; })
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$kdir.new"; done
  # Trixie (merged /usr) ships the modules under usr/lib/modules: depmod/modprobe -d want lib/modules.
  [ ! -e "$kdir.new/lib" ] && [ -d "$kdir.new/usr/lib/modules" ] && ln -s usr/lib "$kdir.new/lib"
  # vmlinuz: boot/vmlinuz-VER (bookworm), lib/modules/VER/vmlinuz (trixie's linux-binary-*).
  vmlinuz=$(cd "$kdir.new" && ls boot/vmlinuz-* lib/modules/*/vmlinuz 2>/dev/null | head -1) || true
  [ -n "$vmlinuz" ] && [ -d "$kdir.new/lib/modules" ] || die "no vmlinuz or modules in ${pkgs[*]}"
  mkdir -p "$kdir.new/boot"; ln -sf "../$vmlinuz" "$kdir.new/boot/vmlinuz"
  rm -rf "$kdir"; mv "$kdir.new" "$kdir"
fi
echo "$cache"
