#include "status.h"

#include <cerrno>
#include <cstring>

namespace jobfs {
namespace {

struct CodeInfo {
    Code code;
    const char* name;
    int err;
};

// One table for names and errno mapping, so the two never drift apart.
constexpr CodeInfo kCodes[] = {
    {Code::ok, "ok", 0},
    {Code::not_found, "not_found", ENOENT},
    {Code::exists, "exists", EEXIST},
    {Code::not_dir, "not_dir", ENOTDIR},
    {Code::is_dir, "is_dir", EISDIR},
    {Code::not_empty, "not_empty", ENOTEMPTY},
    {Code::permission, "permission", EACCES},
    {Code::name_too_long, "name_too_long", ENAMETOOLONG},
    {Code::no_space, "no_space", ENOSPC},
    {Code::io, "io", EIO},
    {Code::invalid, "invalid", EINVAL},
    {Code::not_permitted, "not_permitted", EPERM},
    {Code::bad_handle, "bad_handle", EBADF},
    {Code::too_large, "too_large", EFBIG},
    {Code::no_memory, "no_memory", ENOMEM},
    {Code::busy, "busy", EBUSY},
    {Code::cross_device, "cross_device", EXDEV},
    {Code::unsupported, "unsupported", ENOTSUP},
    {Code::loop, "loop", ELOOP},
    {Code::range, "range", ERANGE},
    {Code::no_data, "no_data", ENODATA},
    {Code::again, "again", EAGAIN},
    {Code::recall, "recall", EAGAIN},
    {Code::timeout, "timeout", ETIMEDOUT},
    {Code::peer_gone, "peer_gone", ENOTCONN},
    {Code::refused, "refused", ECONNREFUSED},
    {Code::protocol, "protocol", EPROTO},
    {Code::cancelled, "cancelled", ECANCELED},
    {Code::internal, "internal", EIO},
};

const CodeInfo* find(Code code) {
    for (const auto& info : kCodes)
        if (info.code == code) return &info;
    return nullptr;
}

} // namespace

std::string_view code_name(Code code) {
    const CodeInfo* info = find(code);
    return info ? info->name : "unknown";
}

bool code_is_known(int32_t value) { return find(static_cast<Code>(value)) != nullptr; }

int Status::to_errno() const {
    const CodeInfo* info = find(code_);
    return info ? info->err : EIO;
}

std::string Status::to_string() const {
    std::string out(code_name(code_));
    if (!message_.empty()) {
        out += ": ";
        out += message_;
    }
    return out;
}

Status Status::with_context(std::string_view context) const {
    if (ok()) return *this;
    std::string msg(context);
    if (!message_.empty()) {
        msg += ": ";
        msg += message_;
    }
    return Status(code_, std::move(msg));
}

Status Status::from_errno(int err, std::string_view context) {
    Code code = Code::io;
    for (const auto& info : kCodes) {
        if (info.err == err && info.code != Code::internal) {
            code = info.code;
            break;
        }
    }
    if (err == EFBIG || err == EMSGSIZE) code = Code::too_large;
    if (err == EOPNOTSUPP) code = Code::unsupported;
    if (err == EWOULDBLOCK) code = Code::again;
    std::string msg(context);
    msg += msg.empty() ? "" : ": ";
    msg += std::strerror(err);
    return Status(code, std::move(msg));
}

} // namespace jobfs
