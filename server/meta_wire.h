// meta_wire.h: conversions between MetaShard's types and the namespace RPCs' wire types.
#pragma once

#include "daemon_protocol.h"
#include "server/meta_shard.h"

namespace jobfs::server {

inline Cred from_wire(const proto::Cred& c) { return Cred{c.uid, c.gid, c.groups}; }

inline proto::Attr to_wire(const Attr& a) {
    return proto::Attr{a.ino,      static_cast<uint8_t>(a.type), a.mode,       a.uid,          a.gid,
                       a.size,     a.nlink,                      a.atime_ns,   a.mtime_ns,     a.ctime_ns,
                       a.rdev,     a.target,                     a.chunk_size, a.stripe_count, a.generation,
                       a.replicas};
}

inline Attr from_wire(const proto::Attr& w) {
    Attr a;
    a.ino = w.ino;
    a.type = static_cast<FileType>(w.type);
    a.mode = w.mode;
    a.uid = w.uid;
    a.gid = w.gid;
    a.size = w.size;
    a.nlink = w.nlink;
    a.atime_ns = w.atime_ns;
    a.mtime_ns = w.mtime_ns;
    a.ctime_ns = w.ctime_ns;
    a.rdev = w.rdev;
    a.target = w.target;
    a.chunk_size = w.chunk_size;
    a.stripe_count = w.stripe_count;
    a.generation = w.generation;
    a.replicas = w.replicas;
    return a;
}

inline proto::UnlinkResponse to_wire(const UnlinkResult& u) { return proto::UnlinkResponse{to_wire(u.attr), u.last_link}; }

inline UnlinkResult from_wire(const proto::UnlinkResponse& w) { return UnlinkResult{from_wire(w.attr), w.last_link}; }

} // namespace jobfs::server
