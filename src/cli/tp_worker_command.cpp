// `radixlm tp-worker` (hidden): one tensor-parallel rank other than 0, started by rank 0's process
// (or by the first rank of another node) with its rank and the group's address; everything else
// comes from rank 0 over the group's connection (dist/tp_worker.h).
#include "cli/commands.h"
#include "dist/tp_worker.h"

namespace rlm::cli {

void add_tp_worker_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  struct Args {
    TpOptions tp;
    int rank = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tp-worker", "A tensor-parallel rank (started by rank 0)");
  sub->group("");  // hidden from --help
  sub->add_option("--rank", a->rank, "This process's rank")->required()->check(CLI::PositiveNumber);
  sub->add_option("--tp", a->tp.tp, "Ranks in the group")->required()->check(CLI::PositiveNumber);
  sub->add_option("--nnodes", a->tp.nnodes, "Machines")->check(CLI::PositiveNumber);
  sub->add_option("--node-rank", a->tp.node_rank, "This machine's index")->check(CLI::NonNegativeNumber);
  sub->add_option("--dist-init-addr", a->tp.dist_init_addr, "Rank 0's HOST:PORT")->required();
  out.emplace_back(sub, [a] { return run_tp_worker(a->tp, a->rank); });
}

}  // namespace rlm::cli
