# The two commands a newcomer needs:
#   make run    — set up, build, and generate text with the embedded default model
#   make test   — set up, build, and run every test
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup build run test clean format

setup:
	bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)
	@# nvcc's temporaries (up to ~100 MB per CUDA file) go beside the build, not to a possibly small /tmp.
	mkdir -p $(BUILD)/tmp
	TMPDIR=$(abspath $(BUILD))/tmp cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/radixlm generate --chat --prompt "What is the capital of France?" --max-tokens 64

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

format:
	find src tests -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
