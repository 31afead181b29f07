// s3_xml.h: the few S3 XML answers the client reads (ListBucketResult, Error,
// InitiateMultipartUploadResult, CompleteMultipartUploadResult). They are flat, so text
// between tags, with XML's entities decoded, is all that is needed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace jobfs::stage {

// The decoded text of every <tag>…</tag> in xml, in order.
std::vector<std::string> xml_all(std::string_view xml, std::string_view tag);
// The raw (undecoded) inner XML of every <tag>…</tag>: for repeated blocks like <Contents>.
std::vector<std::string_view> xml_blocks(std::string_view xml, std::string_view tag);
// The first one's decoded text, or "".
std::string xml_first(std::string_view xml, std::string_view tag);
std::string xml_decode(std::string_view s);
std::string xml_escape(std::string_view s);

} // namespace jobfs::stage
