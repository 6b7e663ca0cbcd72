// The coordinator process minus flags and signals: owns every component in dependency order
// (state lock → store → workers → rendezvous → jobs → metrics → services → gRPC server) and the
// ticker thread that drives timeouts and batched writes.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/job_manager.h"
#include "server/job_service.h"
#include "server/job_store.h"
#include "server/metrics_exporter.h"
#include "server/rendezvous_service.h"
#include "server/rendezvous_store.h"
#include "server/state_lock.h"
#include "server/worker_registry.h"
#include "server/worker_service.h"

namespace fsdpd::server {

class Coordinator {
 public:
  explicit Coordinator(CoordinatorConfig config);
  ~Coordinator();

  // Locks the state folder (server/state_lock.h), opens the store, loads jobs, binds the ports
  // and starts serving. Nothing is written into the state folder but the lock file until the
  // store has opened and loaded.
  absl::Status Start();
  // Graceful: sessions close with UNAVAILABLE, jobs keep their state, the store is flushed.
  void Shutdown();

  // "127.0.0.1:7070" with the port actually bound (the config may ask for port 0).
  const std::string& listen_address() const { return listen_address_; }
  MetricsExporter* metrics() { return metrics_.get(); }
  JobManager* jobs() { return jobs_.get(); }

 private:
  void RunTicker();
  // Mirrors the store's health on the job service's health status (ticker thread).
  void ReportStoreHealth();
  // Health "fsdpd.LostWorkerDecisions" is NOT_SERVING while the job manager has suspended its
  // lost-worker decisions (JobManager::GetLivenessHealth; ticker thread).
  void ReportLiveness();
  // Sets a service's status ("" for the whole server) on the main port and the health port.
  void SetServing(const std::string& service, bool serving);
  absl::Status StartHealthPort();

  CoordinatorConfig config_;
  // First member, so destroyed last: the folder stays locked until the store is closed.
  std::unique_ptr<StateLock> state_lock_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WorkerRegistry> workers_;
  std::unique_ptr<RendezvousStore> rendezvous_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<MetricsExporter> metrics_;
  std::unique_ptr<Authenticator> authenticator_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<RendezvousServiceImpl> rendezvous_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::CallbackGenericService> health_fallback_;  // outlives health_server_
  std::unique_ptr<grpc::Server> health_server_;  // --health-listen: grpc.health.v1 only
  std::string listen_address_;

  std::mutex ticker_mutex_;
  std::condition_variable ticker_wakeup_;
  bool schedule_now_ = false;  // a submission asked for a scheduling pass (ticker_mutex_)
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread ticker_;
  bool job_service_serving_ = false;    // ticker thread only, after Start
  bool deciding_lost_workers_ = false;  // ticker thread only, after Start
  std::string cluster_id_;              // the state folder's (server/cluster_identity.h)
};

}  // namespace fsdpd::server
