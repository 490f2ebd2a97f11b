// The read bandwidth of this machine now, for benchmarks on a shared host, where
// the bandwidth two threads get moves by up to 2x within a minute: a figure is
// compared with probes taken just before and just after it.
#pragma once

// The roofline tool's read figure: each of `threads` threads first touches its own
// slice of a fresh 1 GiB buffer, then all sum their slices; GB/s, best of 5 passes.
double measure_read_bandwidth(int threads);

// measure_read_bandwidth run by `qhx_bench --bandwidth-probe` in a process of its own
// (so the caller's peak RSS does not count the buffer); 0 if it failed.
double read_bandwidth_now(int threads);
