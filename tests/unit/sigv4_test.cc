// sigv4_test.cc: the signer against AWS's published Signature Version 4 test suite
// (aws-sig-v4-test-suite, 2015-08-30, credentials AKIDEXAMPLE, region us-east-1, service
// "service"): canonical request, string to sign and Authorization of each case, as the suite
// states them. S3 signs the path as sent, so the "-unnormalized" forms of the path cases are
// used. Also the S3 XML reader and the configuration lookup (env, ~/.aws files, profiles).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "client/stage/location.h"
#include "client/stage/s3_config.h"
#include "client/stage/s3_xml.h"
#include "client/stage/sigv4.h"
#include "client/stage/stage.h"

using namespace jobfs;
using namespace jobfs::stage;

namespace {

struct Vector {
    const char* name;
    const char* method;
    const char* path;
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;
    const char* session_token;
    const char* payload_hash;
    const char* canonical_request;
    const char* string_to_sign;
    const char* signature;
};

const char* kE = kEmptySha256;
const char* kCredScope = "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request";

const std::vector<Vector>& vectors() {
    static const std::vector<Vector> v = {
        {"get-vanilla", "GET", "/", {}, {}, "", kE,
         "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
         "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
        {"get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", {}, {}, "", kE,
         "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\nhost:example.amazonaws.com\n"
         "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
         "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"},
        {"get-utf8", "GET", "/\xe1\x88\xb4", {}, {}, "", kE,
         "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
         "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"},
        {"get-space-unnormalized", "GET", "/example space/", {}, {}, "", kE,
         "GET\n/example%20space/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
         "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"},
        {"get-slashes-unnormalized", "GET", "//example//", {}, {}, "", kE,
         "GET\n//example//\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "528ec3105ee1f34ab014bb0a1a45da0ed2742a4fea3555149e5b4d5d201eb240",
         "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5"},
        {"get-vanilla-query-order-key-case", "GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}, {}, "", kE,
         "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
         "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
        {"get-vanilla-query-order-encoded", "GET", "/",
         {{"Param-3", "Value3"}, {"Param", "Value2"}, {"\xe1\x88\xb4", "Value1"}}, {}, "", kE,
         "GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\n"
         "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
         "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac"},
        {"get-vanilla-query-unreserved", "GET", "/",
         {{"-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
           "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"}}, {}, "", kE,
         "GET\n/\n-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
         "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\nhost:example.amazonaws.com\n"
         "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
         "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"},
        {"get-vanilla-utf8-query", "GET", "/", {{"\xe1\x88\xb4", "bar"}}, {}, "", kE,
         "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
         "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"},
        {"get-vanilla-with-session-token", "GET", "/", {}, {},
         "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267", kE,
         "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n"
         "x-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n\n"
         "host;x-amz-date;x-amz-security-token\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b",
         "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"},
        {"get-header-key-duplicate", "GET", "/", {},
         {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}}, "", kE,
         "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\nx-amz-date:20150830T123600Z\n\n"
         "host;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
         "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"},
        {"get-header-value-order", "GET", "/", {},
         {{"My-Header1", "value4"}, {"My-Header1", "value1"}, {"My-Header1", "value3"}, {"My-Header1", "value2"}}, "", kE,
         "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\nx-amz-date:20150830T123600Z\n\n"
         "host;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
         "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"},
        {"get-header-value-trim", "GET", "/", {}, {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}}, "", kE,
         "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\nx-amz-date:20150830T123600Z\n\n"
         "host;my-header1;my-header2;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
         "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"},
        {"post-vanilla-query", "POST", "/", {{"Param1", "value1"}}, {}, "", kE,
         "POST\n/\nParam1=value1\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
         "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"},
        {"post-header-value-case", "POST", "/", {}, {{"My-Header1", "VALUE1"}}, "", kE,
         "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:VALUE1\nx-amz-date:20150830T123600Z\n\n"
         "host;my-header1;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
         "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"},
        {"post-x-www-form-urlencoded", "POST", "/", {},
         {{"Content-Type", "application/x-www-form-urlencoded"}, {"Content-Length", "13"},
          {"x-amz-content-sha256", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"}},
         "", "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
         "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n"
         "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
         "x-amz-date:20150830T123600Z\n\ncontent-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
         "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
         "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
         "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb",
         "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"},
    };
    return v;
}

constexpr std::time_t kSuiteTime = 1440938160;  // 2015-08-30T12:36:00Z

class SuiteTest : public ::testing::TestWithParam<size_t> {};

TEST_P(SuiteTest, MatchesThePublishedSuite) {
    const Vector& v = vectors()[GetParam()];
    SCOPED_TRACE(v.name);
    SignRequest r{v.method, "example.amazonaws.com", v.path, v.query, v.headers, v.payload_hash};
    Credentials c{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", v.session_token};
    const Signature s = sign(r, c, "us-east-1", "service", kSuiteTime);
    EXPECT_EQ(s.canonical_request, v.canonical_request);
    EXPECT_EQ(s.string_to_sign, v.string_to_sign);
    EXPECT_EQ(s.signature, v.signature);
    const std::string creq = v.canonical_request;
    const auto end = creq.rfind('\n'), begin = creq.rfind('\n', end - 1);
    EXPECT_EQ(s.authorization, std::string("AWS4-HMAC-SHA256 ") + kCredScope +
                                   ", SignedHeaders=" + creq.substr(begin + 1, end - begin - 1) +
                                   ", Signature=" + v.signature);
    EXPECT_EQ(s.amz_date, "20150830T123600Z");
}

INSTANTIATE_TEST_SUITE_P(AwsSigV4TestSuite, SuiteTest, ::testing::Range<size_t>(0, 16));

TEST(Sigv4, VectorCountMatchesInstantiation) { EXPECT_EQ(vectors().size(), 16u); }

// AWS's S3 documentation example (GET Object with a Range, "Example: GET Object").
TEST(Sigv4, S3DocumentationGetObjectExample) {
    SignRequest r{"GET", "examplebucket.s3.amazonaws.com", "/test.txt", {}, {{"range", "bytes=0-9"},
                  {"x-amz-content-sha256", kEmptySha256}}, kEmptySha256};
    Credentials c{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
    const Signature s = sign(r, c, "us-east-1", "s3", 1369353600);  // 2013-05-24T00:00:00Z
    EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(Sigv4, KeysWithSpacesAndUnicodeAreEncodedOnceKeepingSlashes) {
    EXPECT_EQ(canonical_path("/b/dir one/caf\xc3\xa9+x.txt"), "/b/dir%20one/caf%C3%A9%2Bx.txt");
    EXPECT_EQ(canonical_query({{"prefix", "a b/"}, {"list-type", "2"}}), "list-type=2&prefix=a%20b%2F");
    EXPECT_EQ(canonical_query({{"uploads", ""}}), "uploads=");
}

TEST(S3Xml, ListingWithEntitiesAndContinuation) {
    const std::string xml =
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
        "<Contents><Key>a &amp; b/&#233;t&#xE9;.txt</Key><Size>12</Size><ETag>&quot;abc&quot;</ETag></Contents>"
        "<Contents><Key>c</Key><Size>0</Size></Contents>"
        "<NextContinuationToken>tok/+=</NextContinuationToken></ListBucketResult>";
    auto blocks = xml_blocks(xml, "Contents");
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(xml_first(blocks[0], "Key"), "a & b/\xc3\xa9t\xc3\xa9.txt");
    EXPECT_EQ(xml_first(blocks[0], "ETag"), "\"abc\"");
    EXPECT_EQ(xml_first(xml, "NextContinuationToken"), "tok/+=");
    EXPECT_EQ(xml_first("<Error><Code>SignatureDoesNotMatch</Code><Message/></Error>", "Message"), "");
}

TEST(S3Config, EnvironmentProfilesAndEndpoint) {
    char dir[] = "/tmp/jobfs-s3conf-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string d = dir;
    std::ofstream(d + "/credentials") << "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = DEFSECRET\n"
                                         "[other]\naws_access_key_id=OTHERKEY\naws_secret_access_key=OTHERSECRET\n";
    std::ofstream(d + "/config") << "[profile other]\nregion = eu-west-3\nendpoint_url = http://127.0.0.1:9000\n";
    setenv("AWS_SHARED_CREDENTIALS_FILE", (d + "/credentials").c_str(), 1);
    setenv("AWS_CONFIG_FILE", (d + "/config").c_str(), 1);
    for (const char* e : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                          "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "JOBFS_S3_ADDRESSING"})
        unsetenv(e);
    auto c = s3_config_resolve({});
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->creds.access_key, "DEFKEY");
    EXPECT_EQ(c->endpoint_host, "s3.amazonaws.com");
    EXPECT_FALSE(c->path_style);  // AWS itself: virtual-hosted
    setenv("AWS_PROFILE", "other", 1);
    c = s3_config_resolve({});
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->creds.secret_key, "OTHERSECRET");
    EXPECT_EQ(c->region, "eu-west-3");
    EXPECT_EQ(c->scheme, "http");
    EXPECT_EQ(c->endpoint_host, "127.0.0.1:9000");
    EXPECT_TRUE(c->path_style);  // an endpoint override: path-style
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
    c = s3_config_resolve({});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->creds.access_key, "ENVKEY");  // the environment's keys win over AWS_PROFILE
    c = s3_config_resolve({.profile = "default", .endpoint_url = "", .region = "", .addressing = "virtual"});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->creds.access_key, "DEFKEY");  // an explicit --profile wins over the environment
    c = s3_config_resolve({.profile = "", .endpoint_url = "ftp://x", .region = "", .addressing = ""});
    EXPECT_FALSE(c.ok());
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    c = s3_config_resolve({.profile = "missing", .endpoint_url = "", .region = "", .addressing = ""});
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("profile 'missing'"), std::string::npos);
    unsetenv("AWS_PROFILE");
    std::system(("rm -rf " + d).c_str());
}

TEST(Location, Forms) {
    auto a = location_parse("s3://bucket/a/b/");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->kind, Location::s3);
    EXPECT_EQ(a->bucket, "bucket");
    EXPECT_EQ(a->key, "a/b/");
    auto j = location_parse("jobfs:/data/");
    ASSERT_TRUE(j.ok());
    EXPECT_EQ(j->kind, Location::jobfs);
    EXPECT_EQ(j->path, "/data");
    EXPECT_TRUE(j->trailing_slash);
    EXPECT_EQ(location_parse("/scratch/x")->kind, Location::local);
    EXPECT_FALSE(location_parse("s3://").ok());
    EXPECT_FALSE(location_parse("s3:/bucket").ok());
    EXPECT_FALSE(location_parse("jobfs:relative").ok());
}

TEST(Stage, RankSharesAreDeterministicAndCoverEveryKey) {
    int count[3] = {0, 0, 0};
    for (int i = 0; i < 3000; ++i) {
        const std::string k = "train/shard-" + std::to_string(i);
        const int r = stage_rank_of(k, 3);
        ASSERT_EQ(r, stage_rank_of(k, 3));
        ++count[r];
    }
    for (int c : count) EXPECT_GT(c, 800);  // roughly a third each
    EXPECT_EQ(stage_rank_of("x", 1), 0);
}

} // namespace
