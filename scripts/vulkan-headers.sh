#!/usr/bin/env bash
# Prints an include directory with Vulkan headers new enough for ggml-vulkan 0.26 (1.4: it uses
# vk::LayerSettingEXT), for cmake -DVulkan_INCLUDE_DIR=...
#
# The system's (/usr/include) when they are 1.4 or newer. Otherwise (Debian 12 ships 1.3.239)
# Debian 13's libvulkan-dev is downloaded with apt-get from the mirror the system's apt already
# uses, into DIR (default build/vulkan-headers), and unpacked there, not installed: only its
# headers are used; the loader (libvulkan.so) stays the system's. Kept between runs.
#
#   scripts/vulkan-headers.sh [DIR]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(realpath -m "${1:-$root/build/vulkan-headers}")"
package=libvulkan-dev
suite=trixie

is_1_4() { grep -qE 'VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, 1, ([4-9]|[1-9][0-9])' \
    "$1/vulkan/vulkan_core.h" 2>/dev/null; }

if is_1_4 /usr/include; then
    echo /usr/include
    exit 0
fi
if is_1_4 "$dir/root/usr/include"; then
    echo "$dir/root/usr/include"
    exit 0
fi

# the mirror of the system's Debian sources (deb822 or one-line format; none: Debian's own)
shopt -s nullglob
mirror=$(cat /etc/apt/sources.list.d/*.sources /dev/null | sed -n 's/^URIs: *\([^ ]*\/debian\)\/\?$/\1/p' | head -1)
if [[ -z "$mirror" && -f /etc/apt/sources.list ]]; then
    mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\)\/\? .*/\2/p' /etc/apt/sources.list | head -1)
fi
mirror="${mirror:-http://deb.debian.org/debian}"

# only what this script puts there goes
rm -rf "$dir/root" "$dir/lists" "$dir/cache" "$dir/sources.list" "$dir"/${package}_*.deb
mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/root"
echo "deb $mirror $suite main" > "$dir/sources.list"
apt_dirs=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o Debug::NoLocking=1)
echo "vulkan-headers: $package from $mirror $suite into $dir" >&2
apt-get "${apt_dirs[@]}" -q update >&2
(cd "$dir" && apt-get "${apt_dirs[@]}" -q download "$package/$suite" >&2)
dpkg -x "$dir"/${package}_*.deb "$dir/root"
if ! is_1_4 "$dir/root/usr/include"; then
    echo "vulkan-headers: $dir/root/usr/include has no Vulkan 1.4 headers" >&2
    exit 1
fi
echo "$dir/root/usr/include"
