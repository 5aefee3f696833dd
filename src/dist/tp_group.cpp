#include "dist/tp_group.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "dist/cpu_communicator.h"
#include "dist/nccl_communicator.h"

namespace rlm {

namespace {

constexpr double kConnectTimeoutS = 300.0;  // ranks on other nodes may start later

std::string worker_binary_or_default(std::string binary) {
  if (!binary.empty()) return binary;
  if (const char* env = std::getenv("RADIXLM_TP_WORKER_BINARY"); env != nullptr && *env != '\0') return env;
  return "/proc/self/exe";
}

}  // namespace

Status TpOptions::validate() const {
  if (tp < 1) return invalid_argument(str("--tp must be at least 1, got ", tp));
  if (nnodes < 1) return invalid_argument(str("--nnodes must be at least 1, got ", nnodes));
  if (tp % nnodes != 0) return invalid_argument(str("--tp ", tp, " does not divide over --nnodes ", nnodes));
  if (node_rank < 0 || node_rank >= nnodes) {
    return invalid_argument(str("--node-rank must be in [0, ", nnodes, "), got ", node_rank));
  }
  if (nnodes > 1 && dist_init_addr.empty()) {
    return invalid_argument("--nnodes > 1 needs --dist-init-addr HOST:PORT (rank 0's address)");
  }
  if (!dist_init_addr.empty()) RLM_RETURN_IF_ERROR(parse_host_port(dist_init_addr).status());
  return Status::ok();
}

Device rank_device(Device root_device, int rank, const TpOptions& o) {
  if (!root_device.is_cuda()) return root_device;
  return Device::cuda(root_device.index + rank % o.ranks_per_node());
}

StatusOr<std::unique_ptr<Communicator>> make_communicator(TcpGroup& group, Device device, bool one_shot) {
  if (device.is_cpu()) return std::unique_ptr<Communicator>(std::make_unique<CpuCommunicator>(group));
  return make_nccl_communicator(group, device, one_shot);
}

Status TpGroup::spawn_local_ranks(const TpOptions& o, int first_rank, const HostPort& root, const std::string& binary) {
  const std::string exe = worker_binary_or_default(binary);
  for (int r = first_rank; r < first_rank + o.ranks_per_node(); ++r) {
    if (r == rank()) continue;
    std::vector<std::string> args = {exe,
                                     "tp-worker",
                                     "--rank",
                                     std::to_string(r),
                                     "--tp",
                                     std::to_string(o.tp),
                                     "--nnodes",
                                     std::to_string(o.nnodes),
                                     "--node-rank",
                                     std::to_string(o.node_rank),
                                     "--dist-init-addr",
                                     root.to_string()};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return internal_error(str("tensor parallel: cannot start rank ", r, ": fork failed"));
    if (pid == 0) {
      // The worker: its stdout is ours to keep clean (generate prints there); it dies with us.
      ::dup2(2, 1);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "radixlm: cannot start tensor-parallel rank %d: exec %s failed\n", r, exe.c_str());
      ::_exit(127);
    }
    children_.push_back(pid);
  }
  return Status::ok();
}

StatusOr<std::shared_ptr<TpGroup>> TpGroup::start(const TpOptions& o, std::string worker_binary) {
  RLM_RETURN_IF_ERROR(o.validate());
  RLM_CHECK_EQ(o.node_rank, 0);
  std::shared_ptr<TpGroup> g(new TpGroup());
  HostPort addr;
  if (!o.dist_init_addr.empty()) {
    RLM_ASSIGN_OR_RETURN(addr, parse_host_port(o.dist_init_addr));
  }
  RLM_ASSIGN_OR_RETURN(g->control_, TcpGroup::listen(addr, o.tp));
  HostPort root = addr;
  root.port = g->control_->port();
  if (root.host == "0.0.0.0") root.host = "127.0.0.1";
  RLM_RETURN_IF_ERROR(g->spawn_local_ranks(o, 0, root, worker_binary));
  RLM_RETURN_IF_ERROR(g->control_->accept_peers(kConnectTimeoutS));
  g->steps_ = std::make_unique<StepSender>(*g->control_);
  return g;
}

StatusOr<std::shared_ptr<TpGroup>> TpGroup::join(const TpOptions& o, int rank, std::string worker_binary) {
  RLM_RETURN_IF_ERROR(o.validate());
  RLM_ASSIGN_OR_RETURN(const HostPort root, parse_host_port(o.dist_init_addr));
  std::shared_ptr<TpGroup> g(new TpGroup());
  RLM_ASSIGN_OR_RETURN(g->control_, TcpGroup::connect(root, rank, o.tp, kConnectTimeoutS));
  // The first rank of a node other than rank 0's starts the node's other ranks.
  if (rank % o.ranks_per_node() == 0) RLM_RETURN_IF_ERROR(g->spawn_local_ranks(o, rank, root, worker_binary));
  return g;
}

Status TpGroup::init_communicator(Device device, bool one_shot) {
  RLM_ASSIGN_OR_RETURN(comm_, make_communicator(*control_, device, one_shot));
  return Status::ok();
}

TpGroup::~TpGroup() {
  if (steps_ != nullptr) {
    try {
      steps_->shutdown();
    } catch (const GroupError&) {
      // A rank already gone: the others see the closed connection when control_ closes.
    }
  }
  comm_.reset();
  control_.reset();
  // Reap the ranks this process started: they exit on the shutdown message or on the closed
  // connection; one that does not within 30 s is killed.
  const auto t0 = std::chrono::steady_clock::now();
  for (const pid_t pid : children_) {
    while (::waitpid(pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(30)) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace rlm
