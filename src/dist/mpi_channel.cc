#include "dist/mpi_channel.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#include "util/error.h"

namespace mxrl {

namespace {
constexpr size_t kPiece = size_t{1} << 30;  // bytes per MPI call
}

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("MPI {}: {}", what, std::string(msg, static_cast<size_t>(len)));
}

bool MpiSession::initialized() {
  int f = 0;
  MPI_Initialized(&f);
  return f != 0;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiComm::MpiComm(MPI_Comm c) : comm_(c) {
  if (c != MPI_COMM_NULL) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
  }
}

MpiComm MpiComm::split(MPI_Comm parent, int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(parent, color, key, &out), "comm split");
  if (out != MPI_COMM_NULL) MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return MpiComm(out);
}

void MpiComm::send(std::span<const std::byte> b, int dst, int tag) const {
  const uint64_t n = b.size();
  mpi_check(MPI_Send(&n, 1, MPI_UINT64_T, dst, tag, comm_), "send (size)");
  for (size_t at = 0; at < n; at += kPiece)
    mpi_check(MPI_Send(b.data() + at, static_cast<int>(std::min(kPiece, n - at)), MPI_BYTE, dst, tag, comm_), "send");
}

std::vector<std::byte> MpiComm::recv(int src, int tag) const {
  uint64_t n = 0;
  mpi_check(MPI_Recv(&n, 1, MPI_UINT64_T, src, tag, comm_, MPI_STATUS_IGNORE), "recv (size)");
  std::vector<std::byte> b(n);
  for (size_t at = 0; at < n; at += kPiece)
    mpi_check(MPI_Recv(b.data() + at, static_cast<int>(std::min(kPiece, n - at)), MPI_BYTE, src, tag, comm_,
                       MPI_STATUS_IGNORE),
              "recv");
  return b;
}

std::vector<std::byte> MpiComm::bcast(std::span<const std::byte> b, int root) const {
  uint64_t n = b.size();
  mpi_check(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_), "bcast (size)");
  std::vector<std::byte> out(n);
  if (rank_ == root && n) std::copy(b.begin(), b.end(), out.begin());
  for (size_t at = 0; at < n; at += kPiece)
    mpi_check(MPI_Bcast(out.data() + at, static_cast<int>(std::min(kPiece, n - at)), MPI_BYTE, root, comm_), "bcast");
  return out;
}

void MpiComm::bcast_floats(std::vector<float>& v, int root) const {
  const size_t per = kPiece / sizeof(float);
  for (size_t at = 0; at < v.size(); at += per)
    mpi_check(MPI_Bcast(v.data() + at, static_cast<int>(std::min(per, v.size() - at)), MPI_FLOAT, root, comm_),
              "bcast (floats)");
}

void MpiComm::barrier() const { mpi_check(MPI_Barrier(comm_), "barrier"); }

void bcast_chunks(const MpiComm& c, int root, const std::vector<ChunkFrame>& frames) {
  std::array<std::byte, 8 + kChunkHeaderBytes> frame;
  for (const ChunkFrame& f : frames) {
    const uint64_t n = f.payload.size();
    std::memcpy(frame.data(), &n, 8);
    std::memcpy(frame.data() + 8, f.header.data(), kChunkHeaderBytes);
    mpi_check(MPI_Bcast(frame.data(), static_cast<int>(frame.size()), MPI_BYTE, root, c.get()), "bcast (chunk frame)");
    if (n)
      mpi_check(MPI_Bcast(const_cast<std::byte*>(f.payload.data()), static_cast<int>(n), MPI_BYTE, root, c.get()),
                "bcast (chunk payload)");
  }
}

std::string bcast_chunks(const MpiComm& c, int root, uint64_t count, Staging& staging,
                         const std::function<void(uint64_t)>& before) {
  std::array<std::byte, 8 + kChunkHeaderBytes> frame;
  std::vector<std::byte> scratch;
  std::string refused;
  for (uint64_t i = 0; i < count; ++i) {
    if (before) before(i);
    mpi_check(MPI_Bcast(frame.data(), static_cast<int>(frame.size()), MPI_BYTE, root, c.get()), "bcast (chunk frame)");
    uint64_t n = 0;
    std::memcpy(&n, frame.data(), 8);
    if (n > (uint64_t{1} << 30)) fail("chunk {}: a payload of {} bytes is beyond any chunk", i, n);
    std::span<std::byte> slot;
    bool in_place = false;
    if (refused.empty()) {
      try {
        slot = staging.begin_chunk(std::span<const std::byte>(frame).subspan(8), n);
        in_place = true;
      } catch (const Error& e) {
        refused = e.what();
      }
    }
    if (!in_place) {
      scratch.resize(n);
      slot = scratch;
    }
    if (n) mpi_check(MPI_Bcast(slot.data(), static_cast<int>(n), MPI_BYTE, root, c.get()), "bcast (chunk payload)");
    if (in_place) {
      try {
        staging.end_chunk();
      } catch (const Error& e) {
        refused = e.what();
      }
    }
  }
  return refused;
}

}  // namespace mxrl
