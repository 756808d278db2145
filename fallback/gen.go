package fallback

// The XDP objects are generated from bpf/ and committed; `make bpf`
// regenerates them (clang, llvm-strip and libbpf headers needed).
//   lb:     bpf/lb.c, the production program (bpf_jiffies64 clock).
//   lbtest: bpf/lbtest.c, the same program with LBC_TEST: "now" comes from
//           the `clock_ticks` map and each verdict is recorded in the
//           `verdicts` map, for `lbc replay --target xdp` and the
//           differential test.
//   lbbench: bpf/lbbench.c, the production program plus wrappers that
//           restore the input after each run, for Program.Benchmark with
//           Repeat > 1, and lbc_min, the minimal reference program
//           (benchmarks only).
// bpf/lb.c lists the headers and what each holds.

//go:generate go run ./internal/crctable bpf/crc32_table.h
//go:generate go tool bpf2go -target bpfel -go-package fallback -output-dir $BPF2GO_OUT lb bpf/lb.c -- -O2 -g -Wall -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -target bpfel -go-package fallback -output-dir $BPF2GO_OUT -type verdict lbtest bpf/lbtest.c -- -O2 -g -Wall -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -target bpfel -go-package fallback -output-dir $BPF2GO_OUT lbbench bpf/lbbench.c -- -O2 -g -Wall -I/usr/include/x86_64-linux-gnu

// Object is the production program's ELF object (lb_bpfel.o) as embedded
// in this binary: `lbc version` prints its hash.
func Object() []byte { return _LbBytes }
