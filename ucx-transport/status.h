// status.h: the one error type of jobfs.
//
// Every layer returns a Status (or a Result<T>, result.h). A Status is a typed code plus a
// message with the context a user needs ("open /ckpt/a: no such file"). Codes travel on the
// wire as their numeric value, so the numbers below are part of the protocol: append new
// codes, never renumber. At the POSIX/C edge a Status becomes -errno (to_errno()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace jobfs {

enum class Code : int32_t {
    ok = 0,
    // File-system outcomes, each mapping to one errno.
    not_found = 1,         // ENOENT
    exists = 2,            // EEXIST
    not_dir = 3,           // ENOTDIR
    is_dir = 4,            // EISDIR
    not_empty = 5,         // ENOTEMPTY
    permission = 6,        // EACCES
    name_too_long = 7,     // ENAMETOOLONG
    no_space = 8,          // ENOSPC
    io = 9,                // EIO
    invalid = 10,          // EINVAL
    not_permitted = 11,    // EPERM
    bad_handle = 12,       // EBADF
    too_large = 13,        // EFBIG / EMSGSIZE
    no_memory = 14,        // ENOMEM
    busy = 15,             // EBUSY
    cross_device = 16,     // EXDEV
    unsupported = 17,      // ENOTSUP
    loop = 18,             // ELOOP
    range = 19,            // ERANGE
    no_data = 20,          // ENODATA (missing xattr)
    again = 21,            // EAGAIN
    // Inside a daemon only: the operation met a directory delegated to a client, which must
    // be recalled before it runs again (server/dir_delegations.h). Never sent to a client.
    recall = 22,           // EAGAIN
    // Transport outcomes.
    timeout = 100,         // ETIMEDOUT: no answer within the request's deadline
    peer_gone = 101,       // ENOTCONN: the connection broke (peer died, reset)
    refused = 102,         // ECONNREFUSED: nobody listens there / connection rejected
    protocol = 103,        // EPROTO: malformed or incompatible message
    cancelled = 104,       // ECANCELED: the worker shut down before completion
    internal = 105,        // EIO: a bug or an unexpected library error
};

class Status {
public:
    Status() = default;
    Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status OK() { return {}; }

    bool ok() const { return code_ == Code::ok; }
    Code code() const { return code_; }
    const std::string& message() const { return message_; }

    // The errno a POSIX caller sees (positive; the C API returns its negation).
    int to_errno() const;
    // "peer_gone: connect 127.0.0.1:7000: connection reset"
    std::string to_string() const;
    // Adds context in front of the message: "write /a: " + "no space left".
    Status with_context(std::string_view context) const;

    static Status from_errno(int err, std::string_view context);

    friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_; }

private:
    Code code_ = Code::ok;
    std::string message_;
};

// Name of a code ("not_found"), and whether a wire value names a known code.
std::string_view code_name(Code code);
bool code_is_known(int32_t value);

// Failures a newer chain table may cure: the daemon asked is lost, hung or cut off, or no
// longer serves what was asked (`again`). Callers that route by the chain table refresh it and
// ask again (FileIO, metadata calls, cross-shard steps, the rename lock).
inline bool cured_by_newer_table(Code c) {
    return c == Code::again || c == Code::peer_gone || c == Code::timeout || c == Code::refused ||
           c == Code::cancelled;
}

} // namespace jobfs
