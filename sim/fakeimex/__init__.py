"""Fake `nvidia-imex` and `nvidia-imex-ctl` for the simulated cluster.

No GPU and no NVIDIA binary exist in the sim, yet the driver's job is to write IMEX configs,
start, signal, probe and restart `nvidia-imex`. These stand-ins read the real config and
nodes-config formats, form a peer domain over TCP, serve the command service that
`nvidia-imex-ctl -q` / `-N -j` query, and report the DCGM state vocabulary, so supervision
code can be tested against real processes. `install.install()` puts launchers named like the
real binaries into a directory for PATH.
"""
