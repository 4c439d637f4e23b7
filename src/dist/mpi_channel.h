// The MPI transport (Open MPI): a communicator wrapper with byte messages,
// and the chunked bundle channel over it (sync/transport.h), for the
// distributed runtime (dist/distributed.h). Messages larger than 1 GiB go in
// pieces (MPI counts are int).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <mpi.h>

#include "sync/transport.h"

namespace mxrl {

// MPI_Init_thread (funneled: only the main thread calls MPI) and Finalize.
// MPI's errors return codes (MPI_ERRORS_RETURN), which throw mxrl::Error.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  static bool initialized();

 private:
  int rank_ = 0, size_ = 1;
};

class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm c);
  // Splits `parent` by color (MPI_UNDEFINED: this rank gets no communicator).
  static MpiComm split(MPI_Comm parent, int color, int key);
  bool valid() const { return comm_ != MPI_COMM_NULL; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm get() const { return comm_; }

  void send(std::span<const std::byte> b, int dst, int tag) const;
  std::vector<std::byte> recv(int src, int tag) const;
  // Root's bytes to every rank (size first); returns them on every rank.
  std::vector<std::byte> bcast(std::span<const std::byte> b, int root) const;
  void bcast_floats(std::vector<float>& v, int root) const;  // v sized alike on every rank
  void barrier() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0;
};

// The chunked channel as a broadcast from `root` (sync/transport.h): per
// chunk, a 72-byte frame [payload bytes u64][header], then the payload,
// which receivers write straight into their staging buffer. The root sends
// `frames`; the others receive `count` chunks into `staging`, and return the
// first refusal ("" if none; after one, the rest are received and dropped,
// so every rank stays in step). `before(i)` runs before chunk i arrives.
void bcast_chunks(const MpiComm& c, int root, const std::vector<ChunkFrame>& frames);
std::string bcast_chunks(const MpiComm& c, int root, uint64_t count, Staging& staging,
                         const std::function<void(uint64_t)>& before = {});

// Throws mxrl::Error naming `what` when an MPI call fails.
void mpi_check(int rc, const char* what);

}  // namespace mxrl
