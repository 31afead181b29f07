/* jobfs_proc.c: starting programs from slurmd's prolog (a multi-threaded process: between
 * fork and exec only async-signal-safe calls), waiting for them with a deadline, and stopping
 * them by pid without hitting a process that merely reuses the pid.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobfs_spank.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* In the child: stdio, credentials, exec. Only async-signal-safe calls. */
static void child_exec(char *const argv[], char *const envp[], uid_t uid, gid_t gid, int out_fd, int err_fd)
{
	int null_fd;

	/* slurmd may run the prolog with 0, 1 or 2 closed, so the descriptors handed to us may
	 * be among them: move them out of the way before stdio is set up. */
	if (out_fd >= 0)
		out_fd = fcntl(out_fd, F_DUPFD, 10);
	if (err_fd >= 0)
		err_fd = fcntl(err_fd, F_DUPFD, 10);
	null_fd = open("/dev/null", O_RDWR);
	if (null_fd < 0 || (null_fd = fcntl(null_fd, F_DUPFD, 10)) < 0)
		_exit(127);
	dup2(null_fd, 0);
	dup2(out_fd >= 0 ? out_fd : null_fd, 1);
	dup2(err_fd >= 0 ? err_fd : null_fd, 2);
	close_range(3, ~0u, 0);
	if (uid != 0) {
		if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
			_exit(126);
	}
	if (chdir("/") != 0)
		_exit(126);
	execve(argv[0], argv, envp);
	_exit(127);
}

/* Waits at most timeout_s for our child pid, then kills it (-1, errno ETIMEDOUT); *status is
 * its wait status. */
int jobfs_wait_child(pid_t pid, unsigned timeout_s, int *status)
{
	double deadline = now_s() + timeout_s;
	pid_t r;

	for (;;) {
		r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
		if (now_s() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, status, 0);
			errno = ETIMEDOUT;
			return -1;
		}
		usleep(10000);
	}
}

/* Runs argv and waits at most timeout_s for it; *status is its wait status. */
int jobfs_run(char *const argv[], char *const envp[], uid_t uid, gid_t gid, int out_fd, int err_fd,
	      unsigned timeout_s, int *status)
{
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0)
		child_exec(argv, envp, uid, gid, out_fd, err_fd);
	return jobfs_wait_child(pid, timeout_s, status);
}

/* Starts argv as a daemon of its own (new session, so no signal to the prolog's process group
 * reaches it), so that it outlives the prolog that started it: the job's steps come and go,
 * the file system stays. It stays our child while the prolog waits for it (jobfs_child_exited
 * tells how it ended) and is handed to init when the prolog's process exits. It runs at the
 * nice value given, set while still root: the job's user could not raise its priority
 * (jobfsd(8), --nice). */
int jobfs_spawn_detached(char *const argv[], char *const envp[], uid_t uid, gid_t gid, int nice, int out_fd,
			 int err_fd, pid_t *pid)
{
	pid_t child = fork();

	if (child < 0)
		return -1;
	if (child == 0) {
		setsid();
		if (setpriority(PRIO_PROCESS, 0, nice) != 0) {
			/* To the daemon's log, whose tail the caller shows with "exit status 126". */
			dprintf(err_fd, "spank_jobfs: cannot set nice value %d for %s: %s\n", nice, argv[0],
				strerror(errno));
			_exit(126);
		}
		child_exec(argv, envp, uid, gid, out_fd, err_fd);
	}
	*pid = child;
	return 0;
}

/* Whether our child pid has ended; if so, how, in words ("exit status 1", "signal 11"). */
bool jobfs_child_exited(pid_t pid, char *how, size_t len)
{
	int status;

	if (waitpid(pid, &status, WNOHANG) != pid)
		return false;
	if (WIFEXITED(status))
		snprintf(how, len, "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(how, len, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(how, len, "ended");
	return true;
}

/* kill(pid, 0) says yes for a zombie, and the init here reaps late: read the state. */
bool jobfs_pid_alive(pid_t pid)
{
	char path[64], buf[512], *p;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (jobfs_read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/* Whether pid runs `program` (its argv[0]), so that a reused pid is never signalled. */
bool jobfs_pid_is(pid_t pid, const char *program)
{
	char path[64], buf[PATH_MAX];

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if (jobfs_read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	return strcmp(buf, program) == 0;
}

/* SIGTERM, up to grace_s for it to end, then SIGKILL. */
int jobfs_stop_pid(pid_t pid, unsigned grace_s)
{
	double deadline = now_s() + grace_s;

	if (!jobfs_pid_alive(pid))
		return 0;
	kill(pid, SIGTERM);
	while (jobfs_pid_alive(pid)) {
		if (now_s() > deadline) {
			kill(pid, SIGKILL);
			deadline = now_s() + 5;
			while (jobfs_pid_alive(pid) && now_s() < deadline)
				usleep(20000);
			return jobfs_pid_alive(pid) ? -1 : 1;
		}
		usleep(20000);
	}
	return 0;
}

/* The process whose argv[0] is `program` and which has `arg` among its arguments. */
pid_t jobfs_find_process(const char *program, const char *arg)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = -1;
	char path[300], buf[8192];

	if (!d)
		return -1;
	while (found < 0 && (e = readdir(d))) {
		int n, off;
		pid_t pid = (pid_t)atoi(e->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		n = jobfs_read_file(path, buf, sizeof(buf));
		if (n <= 0 || strcmp(buf, program) != 0)
			continue;
		for (off = 0; off < n; off += strlen(buf + off) + 1)
			if (!strcmp(buf + off, arg) && jobfs_pid_alive(pid)) {
				found = pid;
				break;
			}
	}
	closedir(d);
	return found;
}

/* The last non-empty line of a log, for a message that says why something failed. */
void jobfs_log_tail(const char *path, char *out, size_t len)
{
	char buf[16384], *end, *start;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t size;
	ssize_t n;

	snprintf(out, len, "no message (see %s)", path);
	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)sizeof(buf) - 1)
		lseek(fd, size - (off_t)sizeof(buf) + 1, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	end = buf + n;
	while (end > buf && (end[-1] == '\n' || end[-1] == ' '))
		*--end = '\0';
	start = strrchr(buf, '\n');
	start = start ? start + 1 : buf;
	if (*start)
		snprintf(out, len, "%s", start);
}
