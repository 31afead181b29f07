// local_read_socket.h: the Unix socket through which a daemon hands readers on its node
// read-only descriptors of its chunk files (local reads: docs/design.md, "Local reads").
// Both ends live here, beside each other, because they are one protocol:
// server/local_read_server.h serves it, client/local_reads.h uses it.
//
// The socket is a SOCK_SEQPACKET socket in the abstract namespace: no file to clean up after a
// daemon killed with -9, and, like a node, one per network namespace, so a reader only ever
// finds the daemons of its own node. Its name comes from the job's secret and the daemon's rank.
//
// Protocol (every message one packet):
//   reader -> daemon: kLocalReadHello followed by the job's secret
//   daemon -> reader: one byte 'k' (a wrong secret: the daemon closes the connection)
//   then any number of
//   reader -> daemon: LocalRequest
//   daemon -> reader: LocalReplyHeader, then its CRC32Cs and hole indexes (uint32 each), with
//                     the chunk file's descriptor attached (SCM_RIGHTS) when error is 0 and
//                     the daemon holds the chunk: a file description opened for this reply
//                     alone, which the reader may change (it sets O_DIRECT on it for direct
//                     reads, client/local_reads.h)
// LocalOp::describe asks for what ChunkStore::describe says of a range (the stored CRC32C of
// every block it touches, which of them are holes, the file's length and identity) and the
// descriptor (byte i of the chunk is byte data_offset + i of the file: the checksums come
// first, server/chunk_store.h): all a reader needs to read the range itself and check it, with no transport
// round trip. A replicated chunk's request names the reader's chain of it and the chain table
// it comes from; the daemon answers it only as a read over the transport would be (a table
// not older than its own, a member of the chain, and no write of the chunk in flight here
// unless it is the tail), else EAGAIN: read it over the transport, where CRAQ's rules apply.
// LocalOp::open asks for the descriptor only (read-ahead).
// LocalOp::stamps asks for the daemon's chunk stamps (server/chunk_stamps.h): a read-only
// descriptor of kStampSlots StampSlots (in memory); slot stamp_slot(ino)'s `stamp` moves
// before and after every change of a chunk of file ino held there, and its `busy` counts the
// changes under way. A describe's reply carries the stamp from before the chunk was described
// (`stamp`): while the slot still shows it, what the reply said of the chunk stands, and a
// reader may read the chunk again without asking (client/kept_chunks.h). The connection the
// stamps came on stays open as long as the reader uses them: its hang-up says the daemon is
// gone (its stamps move no more).
// LocalOp::chunk_dir asks for a descriptor of the daemon's chunk directory (O_PATH), in which
// chunk_file_name(ino, index) names a chunk's file, laid out as ChunkFileEntry says, its bytes
// from data_offset on. A reader allowed to open the files (the file system's permissions
// decide: the daemon's user) describes a chunk itself, reading its stamp (quiet: busy 0)
// before it looks: no question to the daemon.
// LocalOp::map_arena hands the daemon the client's write arena (a size-sealed memfd, attached:
// server/write_arenas.h); the reply's `token` names it in ChunkWriteRequest::arena. The
// daemon unmaps it when the connection closes.
// Whoever holds the secret may read every chunk anyway (over the transport): the socket gives
// no more than that, and only read-only descriptors.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "result.h"

namespace jobfs::transport {

inline constexpr char kLocalReadHello[] = "jobfs-local-reads-5:";

enum class LocalOp : uint32_t { open = 1, describe = 2, map_arena = 3, stamps = 4, chunk_dir = 5 };
// The chunk stamps: how many slots, and the slot of a file's chunks (a Fibonacci hash: files
// made one after another fall in different slots).
inline constexpr uint32_t kStampSlots = 4096;
inline uint32_t stamp_slot(uint64_t ino) { return static_cast<uint32_t>((ino * 0x9E3779B97F4A7C15ull) >> 52); }
static_assert(kStampSlots == 1u << 12);
struct StampSlot {
    uint64_t stamp; // moves before and after each change of the files' chunks
    uint64_t busy;  // changes under way
};
// A chunk's file (server/chunk_store.h): in its first data_offset bytes one entry per 64 KiB
// block, then the chunk's bytes; its name under the chunk directory: "xx/<ino>.<index>" in hex,
// xx the inode's last byte.
struct ChunkFileEntry {
    uint32_t crc;     // CRC32C of the block's bytes, up to the chunk's length
    uint32_t written; // 1 once the block was written (0: a hole, which reads as zeros)
};
static_assert(sizeof(ChunkFileEntry) == 8);
std::string chunk_file_name(uint64_t ino, uint64_t index);
inline constexpr uint32_t kLocalMaxChain = 3; // placement.h's kMaxReplicas
struct LocalRequest {
    uint32_t op = 0;           // LocalOp
    uint32_t chain_length = 0; // describe of a replicated chunk: the reader's chain of it (0, 1: unreplicated)
    uint64_t ino = 0, index = 0;
    uint64_t offset = 0, length = 0; // describe: the range
    uint64_t table_version = 0;      // the chain table the chain comes from
    uint32_t chain[kLocalMaxChain] = {};
    uint32_t reserved = 0;
};
struct LocalReplyHeader {
    int32_t error = 0;  // 0, or an errno (ENOENT: no such chunk)
    uint32_t crcs = 0;  // CRC32Cs that follow: of every block the range touches (describe)
    uint32_t holes = 0; // hole indexes (into the CRC32Cs) that follow them: blocks never written
    uint32_t data_offset = 0; // where the chunk's bytes start in the file passed (open, describe)
    uint64_t held = 0;  // the chunk's length (describe; 0: no such chunk)
    uint64_t file_dev = 0, file_ino = 0;
    uint64_t token = 0; // map_arena: the arena's token
    uint64_t stamp = 0; // describe: the chunk's stamp before it was described (LocalOp::stamps)
};
// A descriptor owned: closed when it goes out of scope unless released. Descriptors that come
// with a message are held in one at once, so that no way out leaks them.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept {
        if (this != &o) reset(o.release());
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    int release() { return std::exchange(fd_, -1); }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

// A reply as both ends see it, with the descriptor it carries (none: empty).
struct LocalReply {
    LocalReplyHeader header;
    std::vector<uint32_t> crcs, holes;
    UniqueFd fd;
};
constexpr uint32_t kLocalMaxBlocks = 4096; // per reply: a 256 MiB range of 64 KiB blocks


// "jobfs-<hash of the secret>-<rank>" (the abstract namespace; no leading NUL).
std::string local_read_socket_name(const std::string& secret, uint32_t rank);

// Daemon side: a listening socket of that name (Code::exists: another process has it).
Result<int> local_read_listen(const std::string& name);
// Sends a reply, with `fd` attached when it is not -1.
Status local_read_send_reply(int sock, const LocalReply& reply);

// Reader side: connects and says hello. Code::not_found: no daemon of that name on this node.
Result<int> local_read_connect(const std::string& name, const std::string& secret,
                               std::chrono::milliseconds timeout);
// Sends a request (with `fd` attached when it is not -1) and receives its reply (an error in it
// is the daemon's answer, not a failure). A failure leaves the connection unusable.
Result<LocalReply> local_read_call(int sock, const LocalRequest& req, int fd = -1);
// The two halves of local_read_call, for a reader with several requests in flight: the daemon
// answers the requests of a connection one by one, in the order they came.
Status local_read_send_request(int sock, const LocalRequest& req, int fd = -1);
Result<LocalReply> local_read_receive_reply(int sock);
// Daemon side: receives one packet into buf (at most buf.size() bytes) and the descriptor
// attached to it, if any, into *fd (else it is left empty). Returns recvmsg's count.
ssize_t local_read_receive(int sock, std::span<char> buf, UniqueFd* fd);

} // namespace jobfs::transport
