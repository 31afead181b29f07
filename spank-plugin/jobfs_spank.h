/* jobfs_spank.h: what the files of spank_jobfs.so share. One file per Slurm context, as in
 * NVIDIA's pyxis: jobfs_srun.c (srun, sbatch, salloc: check the user's options), jobfs_prolog.c
 * (slurmd's job prolog and epilog: start and stop the file system of the job on this node),
 * jobfs_slurmstepd.c (a step's slurmstepd: hand the file system to the tasks, or fail the step
 * with the prolog's error). The helpers below have one job each.
 *
 * Every message starts with "spank_jobfs:" (the admin's log) or "jobfs:" (what the user reads).
 */
#ifndef JOBFS_SPANK_H
#define JOBFS_SPANK_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <slurm/spank.h>

#define JOBFS_MSG_MAX 1024

/* The plugstack.conf arguments (name=value), with their defaults in jobfs_config.c. */
struct jobfs_config {
	char storage_dir[PATH_MAX];  /* the node's local disk; a job's data in job-ID below it */
	char mount_root[PATH_MAX];   /* default mount point: mount_root/ID */
	char state_dir[PATH_MAX];    /* per job: cluster descriptor, pid, logs (state_dir/ID) */
	char jobfsd[PATH_MAX];       /* programs */
	char jobfs_fuse[PATH_MAX];
	char jobfs[PATH_MAX];
	char key_file[PATH_MAX];     /* node-shared key the per-job secrets derive from */
	char ucx_tls[128];           /* UCX_TLS of the daemons and mounts ("" = UCX's choice) */
	char log_level[16];          /* jobfsd --log-level */
	int daemon_nice;             /* jobfsd --nice, set by us before it runs as the user */
	uint32_t replicas;
	uint64_t chunk_size;
	uint32_t stripe_count;
	bool keep_data;
	uint16_t port_min, port_max; /* a job's daemons listen on port_min + ID % range */
	unsigned startup_timeout_s;  /* how long the group may take to come up */
	unsigned stage_timeout_s;    /* how long one node's stage-in or stage-out may take */
};

/* What the user asked for (--jobfs[=k=v,...], --jobfs-mount, --jobfs-stage-in/out). */
struct jobfs_request {
	bool enabled;
	uint32_t replicas;     /* 0: the admin's default */
	uint64_t chunk_size;   /* 0: the admin's default */
	uint32_t stripe_count; /* 0: the admin's default */
	bool stripe_set;
	char mount[PATH_MAX];  /* "": mount_root/ID */
	char *stage_in;        /* "SRC:DST;SRC:DST..." (NULL: none), built by the option callbacks */
	char *stage_out;
};

/* One job on one node, as the prolog sets it up and the epilog tears it down. */
struct jobfs_job {
	uint32_t id;
	uid_t uid;
	gid_t gid;
	char user[64];
	char node[256];          /* this node's Slurm name */
	char nodelist[4096];     /* the job's nodes (Slurm host list) */
	uint32_t node_index;     /* this node's place in nodelist; node 0 runs rank 0 */
	uint32_t node_count;
	uint16_t port;
	char job_dir[PATH_MAX];  /* state_dir/ID */
	char data_dir[PATH_MAX]; /* storage_dir/job-ID */
	char mount[PATH_MAX];
	char cluster_file[PATH_MAX];
	bool created_mount;      /* the mount point was made by us (removed at the end) */
	pid_t jobfsd_pid;
	pid_t fuse_pid;
};

/* The plugin's one context: set up once per process (each Slurm context is a process). */
struct jobfs_context {
	struct jobfs_config config;
	struct jobfs_request request;
	struct jobfs_job job;
	bool config_ok;
	char task_error[JOBFS_MSG_MAX]; /* the batch step's failure, for its task (jobfs_slurmstepd.c) */
};

extern struct jobfs_context jobfs_ctx;

/* jobfs_config.c */
int jobfs_config_parse(struct jobfs_config *config, int ac, char **av, char *err, size_t errlen);
int jobfs_parse_size(const char *text, uint64_t *out);

/* jobfs_options.c: the option table and its callbacks */
extern struct spank_option jobfs_options[];
int jobfs_options_register(spank_t sp);
int jobfs_request_parse_layout(struct jobfs_request *req, const char *arg, char *err, size_t errlen);
int jobfs_stage_spec_check(const char *spec, bool in, char *err, size_t errlen);
int jobfs_request_add_stage(struct jobfs_request *req, bool in, const char *spec, char *err, size_t errlen);
/* Reads the options as the job prolog/epilog sees them (spank_option_getopt, job control env). */
int jobfs_request_from_job(spank_t sp, struct jobfs_request *req, char *err, size_t errlen);

/* jobfs_srun.c: srun, sbatch, salloc */
int jobfs_srun_init_post_opt(spank_t sp);

/* jobfs_prolog.c: slurmd's job prolog and epilog */
int jobfs_prolog(spank_t sp);
int jobfs_epilog(spank_t sp);
void jobfs_teardown(const struct jobfs_job *job, const struct jobfs_config *c, bool keep);

/* jobfs_leftovers.c: in the prolog, what ended jobs left on this node without their epilog */
void jobfs_leftovers_remove(const struct jobfs_config *c, uint32_t current);

/* jobfs_slurmstepd.c: a step's slurmstepd */
int jobfs_slurmstepd_user_init(spank_t sp);
int jobfs_slurmstepd_task_init(spank_t sp);

/* jobfs_state.c: the job's directory under state_dir, shared by prolog, steps and epilog */
int jobfs_state_write(const struct jobfs_job *job, const struct jobfs_request *req);
int jobfs_state_read(const char *job_dir, struct jobfs_job *job, struct jobfs_request *req);
int jobfs_state_set_error(const char *job_dir, const char *msg);
int jobfs_state_get_error(const char *job_dir, char *msg, size_t len);
int jobfs_write_file(const char *path, const char *text, mode_t mode, uid_t uid, gid_t gid);
int jobfs_read_file(const char *path, char *buf, size_t len);
int jobfs_remove_tree(const char *path);
int jobfs_mkdir_p(const char *path, mode_t mode);

/* jobfs_proc.c: starting and stopping programs */
int jobfs_run(char *const argv[], char *const envp[], uid_t uid, gid_t gid, int out_fd, int err_fd,
	      unsigned timeout_s, int *status);
int jobfs_wait_child(pid_t pid, unsigned timeout_s, int *status);
int jobfs_spawn_detached(char *const argv[], char *const envp[], uid_t uid, gid_t gid, int nice, int out_fd,
			 int err_fd, pid_t *pid);
bool jobfs_child_exited(pid_t pid, char *how, size_t len);
bool jobfs_pid_alive(pid_t pid);
bool jobfs_pid_is(pid_t pid, const char *program);
int jobfs_stop_pid(pid_t pid, unsigned grace_s);
pid_t jobfs_find_process(const char *program, const char *arg);
void jobfs_log_tail(const char *path, char *buf, size_t len);

/* jobfs_output.c: a message for the user in their job's output file, from the epilog */
int jobfs_job_output_path(uint32_t id, char *path, size_t len);
int jobfs_append_job_output(const struct jobfs_job *job, const char *path, const char *text);

/* jobfs_secret.c */
int jobfs_secret_derive(const char *key_file, uint32_t job_id, uid_t uid, char *hex, size_t len,
			char *err, size_t errlen);

/* jobfs_hostlist.c */
int jobfs_hostlist_expand(const char *list, char ***hosts, size_t *count);
void jobfs_hostlist_free(char **hosts, size_t count);

/* jobfs_stage.c: data staged from and to object stores (--jobfs-stage-in/out) */
int jobfs_stage_pass_credentials(spank_t sp);
int jobfs_stage_in(const struct jobfs_context *ctx, char *err, size_t errlen);
int jobfs_stage_out(const struct jobfs_context *ctx, char *err, size_t errlen);
void jobfs_stage_out_skipped(const struct jobfs_context *ctx, const char *why);
int jobfs_stage_split_spec(const char *spec, char *src, char *dst, size_t len);

#endif /* JOBFS_SPANK_H */
