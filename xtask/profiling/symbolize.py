"""Names the call sites of a memcpy_count dump (see memcpy_count.c).

usage: python3 symbolize.py PID CALLS [ROWS]

Reads /tmp/memcpy_count.PID and /tmp/maps.PID (a copy of /proc/PID/maps taken while the
process ran), prints the bytes and copies a call (CALLS: how many calls the counted phase
made) by call site, largest first, named with addr2line (build with
CARGO_PROFILE_RELEASE_STRIP=false), then the same summed by function.
"""
import subprocess
import sys
from collections import defaultdict

pid, calls = sys.argv[1], int(sys.argv[2])
rows_wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 30
lines = open(f"/tmp/memcpy_count.{pid}").read().splitlines()
fields = lines[0].split()
print(f"{int(fields[1]) / calls:.0f} bytes in {int(fields[3]) / calls:.1f} copies a call")

maps = []
for line in open(f"/tmp/maps.{pid}"):
    parts = line.split()
    if len(parts) >= 6 and "x" in parts[1]:
        start, end = (int(x, 16) for x in parts[0].split("-"))
        maps.append((start, end, int(parts[2], 16), parts[5]))

sites = sorted(
    ((int(a, 16), int(b), int(c)) for a, b, c in (l.split() for l in lines[1:])),
    key=lambda r: -r[1],
)


def load_segments(path):
    """(file offset, virtual address, size) of each LOAD segment of the ELF file at `path`."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
    segments = []
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["LOAD"]:
            segments.append((int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)))
    return segments


segments_of = {}


def locate(address):
    """The file mapped at `address` and the address as addr2line wants it (the ELF virtual
    address, which differs from the file offset by the segment's alignment)."""
    for start, end, offset, path in maps:
        if start <= address < end:
            at = address - start + offset
            if path not in segments_of:
                segments_of[path] = load_segments(path)
            for file_offset, vaddr, size in segments_of[path]:
                if file_offset <= at < file_offset + size:
                    return path, at - file_offset + vaddr
            return path, at
    return None, None


named = []
by_binary = defaultdict(list)
for index, (address, _, _) in enumerate(sites):
    path, offset = locate(address)
    if path:
        by_binary[path].append((index, offset))
names = ["?"] * len(sites)
for path, wanted in by_binary.items():
    out = subprocess.run(
        ["addr2line", "-f", "-C", "-e", path] + [hex(o - 1) for _, o in wanted],
        capture_output=True, text=True,
    ).stdout.splitlines()
    for (index, _), name in zip(wanted, out[0::2]):
        names[index] = name

for (address, size, copies), name in list(zip(sites, names))[:rows_wanted]:
    print(f"{size / calls:9.0f} B {copies / calls:6.2f} x  {name[:150]}")
print("by function:")
summed = defaultdict(int)
for (_, size, _), name in zip(sites, names):
    summed[name] += size
for name, size in sorted(summed.items(), key=lambda kv: -kv[1])[:rows_wanted]:
    print(f"{size / calls:9.0f} B  {name[:150]}")
