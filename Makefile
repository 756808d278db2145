# Generated files are committed; these targets regenerate and check them.
# `make check-generated` regenerates into a temporary directory and fails if
# the result differs from what is committed (CI runs it).

GO ?= go

.PHONY: all bpf check-generated check-generated-bpf

all: bpf

# XDP datapath: fallback/bpf/lb.c → fallback/lb{,test}_bpfel.{go,o} (bpf2go,
# clang, llvm-strip, libbpf-dev headers).
bpf:
	cd fallback && BPF2GO_OUT=. $(GO) generate ./

check-generated: check-generated-bpf

check-generated-bpf:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	cp fallback/bpf/crc32_table.h $$tmp/crc32_table.h.committed && \
	(cd fallback && BPF2GO_OUT=$$tmp $(GO) generate ./) && \
	status=0 && \
	for f in lb_bpfel.go lb_bpfel.o lbtest_bpfel.go lbtest_bpfel.o; do \
		cmp -s $$tmp/$$f fallback/$$f || { echo "fallback/$$f differs from what 'make bpf' generates; run make bpf and commit"; status=1; }; \
	done; \
	cmp -s $$tmp/crc32_table.h.committed fallback/bpf/crc32_table.h || { echo "fallback/bpf/crc32_table.h differs from what 'make bpf' generates"; cp $$tmp/crc32_table.h.committed fallback/bpf/crc32_table.h; status=1; }; \
	exit $$status
