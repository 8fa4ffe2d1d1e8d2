# Sourced by the benchmark scripts that mount a fresh volume (daemon-memory.sh,
# walk-memory.sh): `loop_volume NAME DIR_VAR` makes a work directory under /var/tmp (or
# the directory DIR_VAR names), a 64 GiB sparse image on a loop device with a volume made
# by $BIN, and a mount point, and removes them all at exit (unmounting first). Sets W
# (the work directory; the mount point is $W/mnt) and LOOP.
loop_volume() {
  local name=$1 dir_var=$2
  W=$(mktemp -d "${!dir_var:-/var/tmp}/$name.XXXXXX")
  mkdir -p "$W/mnt"
  LOOP=""
  trap loop_volume_cleanup EXIT
  truncate -s 64G "$W/img"
  LOOP=$(losetup --find --show "$W/img")
  "$BIN" mkfs "$LOOP" >/dev/null
}

loop_volume_cleanup() {
  if mountpoint -q "$W/mnt"; then "$BIN" umount "$W/mnt" >/dev/null 2>&1 || umount -l "$W/mnt" || true; fi
  [[ -n "$LOOP" ]] && losetup -d "$LOOP" 2>/dev/null || true
  rm -rf "$W"
}
