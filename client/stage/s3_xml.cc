// s3_xml.cc: tag extraction and entity decoding for S3's flat XML answers.
#include "client/stage/s3_xml.h"

#include <cstdlib>

namespace jobfs::stage {

std::vector<std::string_view> xml_blocks(std::string_view xml, std::string_view tag) {
    std::vector<std::string_view> out;
    const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
    const std::string empty = "<" + std::string(tag) + "/>";
    size_t pos = 0;
    for (;;) {
        const size_t a = xml.find(open, pos), e = xml.find(empty, pos);
        if (e != std::string_view::npos && (a == std::string_view::npos || e < a)) {
            out.emplace_back();
            pos = e + empty.size();
            continue;
        }
        if (a == std::string_view::npos) break;
        const size_t b = xml.find(close, a + open.size());
        if (b == std::string_view::npos) break;
        out.push_back(xml.substr(a + open.size(), b - a - open.size()));
        pos = b + close.size();
    }
    return out;
}

std::vector<std::string> xml_all(std::string_view xml, std::string_view tag) {
    std::vector<std::string> out;
    for (auto b : xml_blocks(xml, tag)) out.push_back(xml_decode(b));
    return out;
}

std::string xml_first(std::string_view xml, std::string_view tag) {
    auto v = xml_blocks(xml, tag);
    return v.empty() ? "" : xml_decode(v[0]);
}

namespace {
void put_utf8(std::string& out, unsigned long cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}
} // namespace

std::string xml_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '&') {
            out += s[i];
            continue;
        }
        const size_t semi = s.find(';', i);
        if (semi == std::string_view::npos) {
            out += s[i];
            continue;
        }
        const std::string_view ent = s.substr(i + 1, semi - i - 1);
        if (ent == "amp") out += '&';
        else if (ent == "lt") out += '<';
        else if (ent == "gt") out += '>';
        else if (ent == "quot") out += '"';
        else if (ent == "apos") out += '\'';
        else if (ent.size() > 1 && ent[0] == '#') {
            const std::string num(ent.substr(ent[1] == 'x' ? 2 : 1));
            put_utf8(out, std::strtoul(num.c_str(), nullptr, ent[1] == 'x' ? 16 : 10));
        } else {
            out += s.substr(i, semi - i + 1);
        }
        i = semi;
    }
    return out;
}

std::string xml_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out += c;
        }
    }
    return out;
}

} // namespace jobfs::stage
