// `radixlm info`: what this build supports and which devices it sees.
#include <cstdio>

#include "cli/commands.h"
#include "core/device.h"

namespace rlm::cli {

void add_info_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  CLI::App* sub = app.add_subcommand("info", "Print build features and visible devices");
  out.emplace_back(sub, [] {
    std::printf("radixlm\n");
    std::printf("cuda compiled: %s\n", cuda_compiled() ? "yes" : "no");
    std::printf("cuda devices: %d\n", cuda_device_count());
    return 0;
  });
}

}  // namespace rlm::cli
