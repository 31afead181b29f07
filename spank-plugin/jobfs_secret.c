/* jobfs_secret.c: the per-job secret. Every node of a job must present the same one, and the
 * prologs of a job's nodes do not talk to each other; so each derives it on its own, as
 * HMAC-SHA256(key, "jobfs job ID uid UID"), from a key every node of the cluster holds and
 * only root reads (munge's key by default). The job user gets the secret (in the cluster
 * descriptor, mode 0600); other users can neither read it nor compute it, and knowing one
 * job's secret reveals nothing of another's or of the key.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "jobfs_spank.h"

int jobfs_secret_derive(const char *key_file, uint32_t job_id, uid_t uid, char *hex, size_t len,
			char *err, size_t errlen)
{
	unsigned char key[4096], mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0, i;
	char msg[128];
	ssize_t n, total = 0;
	int fd, rc = -1;

	fd = open(key_file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot read key_file %s: %s", key_file, strerror(errno));
		goto out;
	}
	while (total < (ssize_t)sizeof(key) && (n = read(fd, key + total, sizeof(key) - total)) > 0)
		total += n;
	close(fd);
	if (total < 16) {
		snprintf(err, errlen, "key_file %s holds %zd bytes; at least 16 are needed", key_file, total);
		goto out;
	}
	snprintf(msg, sizeof(msg), "jobfs job %" PRIu32 " uid %u", job_id, (unsigned)uid);
	if (!HMAC(EVP_sha256(), key, (int)total, (const unsigned char *)msg, strlen(msg), mac, &mac_len) ||
	    len < 2 * mac_len + 1) {
		snprintf(err, errlen, "cannot derive the job secret (HMAC-SHA256)");
		goto out;
	}
	for (i = 0; i < mac_len; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	rc = 0;
out:
	memset(key, 0, sizeof(key));
	return rc;
}
