// result.h: Result<T>, a value or the Status that explains why there is none.
#pragma once

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

#include "status.h"

namespace jobfs {

template <class T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::in_place_index<1>, std::move(value)) {}
    // A Result built from a Status is an error; an ok Status here is a bug, reported as internal.
    Result(Status status) : v_(std::in_place_index<0>, std::move(status)) {
        if (std::get<0>(v_).ok()) v_ = Status(Code::internal, "Result built from an ok status");
    }

    bool ok() const { return v_.index() == 1; }
    explicit operator bool() const { return ok(); }

    const Status& status() const {
        static const Status kOk;
        return ok() ? kOk : std::get<0>(v_);
    }
    T& value() & { assert(ok()); return std::get<1>(v_); }
    const T& value() const& { assert(ok()); return std::get<1>(v_); }
    T&& value() && { assert(ok()); return std::get<1>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

private:
    std::variant<Status, T> v_;
};

} // namespace jobfs

// Returns the Status of an expression that yields a Status or Result, if it is an error.
#define JOBFS_RETURN_IF_ERROR(expr)                                            \
    do {                                                                       \
        const auto& jobfs_r_ = (expr);                                         \
        if (!jobfs_r_.ok()) return ::jobfs::jobfs_status_of(jobfs_r_);         \
    } while (0)

namespace jobfs {
inline const Status& jobfs_status_of(const Status& s) { return s; }
template <class T>
const Status& jobfs_status_of(const Result<T>& r) { return r.status(); }
} // namespace jobfs
