// Children of a test program: this program run again (/proc/self/exe) with its environment
// (the job's), and a handshake with each: the child says `ready` on its fd 3 and waits for the
// parent's go-ahead, a byte on its stdin. ipc.cu's and shareable.cu's.
#pragma once

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

// A pipe whose ends are close-on-exec (no child inherits them but by a dup2) and above fd 9 (so
// that a dup2 onto 0 or 3 in a child never is a no-op that leaves close-on-exec set).
static void pipe_above_9(int fds[2]) {
    int raw[2];
    if (pipe2(raw, O_CLOEXEC) != 0) {
        perror("pipe2");
        exit(1);
    }
    for (int i = 0; i < 2; i++) {
        fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
        if (fds[i] < 0) {
            perror("fcntl");
            exit(1);
        }
        close(raw[i]);
    }
}

// This program again as a child with `args`, its environment (the job's) and stdout and stderr
// this process's; `actions` (may be null) arrange its other descriptors.
static pid_t spawn(const char* self, std::vector<const char*> args, posix_spawn_file_actions_t* actions) {
    fflush(stdout);
    fflush(stderr);
    std::vector<char*> argv;
    argv.push_back((char*)self);
    for (const char* a : args) argv.push_back((char*)a);
    argv.push_back(nullptr);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, "/proc/self/exe", actions, nullptr, argv.data(), environ);
    if (rc != 0) {
        printf("FAILED: posix_spawn of the %s child: %s\n", args[0], strerror(rc));
        exit(1);
    }
    return pid;
}

// Waits for the `what` child (at most two minutes; killed after that) and requires exit 0.
static void wait_for(pid_t pid, const char* what) {
    int status = 0;
    pid_t done = 0;
    for (int tries = 0; tries < 12000 && done == 0; tries++) {
        done = waitpid(pid, &status, WNOHANG);
        if (done == 0) usleep(10000);
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        printf("FAILED: the %s child hung; killed\n", what);
        exit(1);
    }
    if (done < 0) {
        printf("FAILED: waitpid for the %s child: %s\n", what, strerror(errno));
        exit(1);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status)) printf("FAILED: the %s child died of signal %d\n", what, WTERMSIG(status));
        else printf("FAILED: the %s child exited with %d\n", what, WEXITSTATUS(status));
        exit(1);
    }
}

// In a child: says `ready` on fd 3, then waits for the parent's go-ahead, a byte on stdin.
static bool ready_and_go() {
    const char ready[] = "ready\n";
    if (write(3, ready, sizeof ready - 1) != (ssize_t)(sizeof ready - 1)) {
        printf("FAILED: writing `ready` on fd 3: %s\n", strerror(errno));
        return false;
    }
    close(3);
    char byte;
    ssize_t got;
    do got = read(0, &byte, 1);
    while (got < 0 && errno == EINTR);
    if (got != 1) {
        printf("FAILED: the parent's go-ahead never came (read %zd)\n", got);
        return false;
    }
    return true;
}

// Reads a line from `fd` (at most 15 bytes): a child's `ready`, or empty at its end.
static bool read_ready(int fd) {
    char line[16] = {0};
    size_t len = 0;
    while (len < sizeof line - 1) {
        ssize_t got = read(fd, line + len, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0 || line[len] == '\n') break;
        len++;
    }
    line[len] = '\0';
    return strcmp(line, "ready") == 0;
}

// A child spawned with a handshake: its stdin is `go`'s reading end, its fd 3 `ready`'s
// writing end (the parent keeps the other ends).
struct Handshake {
    pid_t pid;
    int go, ready;
};

static Handshake spawn_with_handshake(const char* self, std::vector<const char*> args) {
    int go[2], ready[2];
    pipe_above_9(go);
    pipe_above_9(ready);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, go[0], 0);
    posix_spawn_file_actions_adddup2(&actions, ready[1], 3);
    pid_t pid = spawn(self, args, &actions);
    posix_spawn_file_actions_destroy(&actions);
    close(go[0]);
    close(ready[1]);
    return Handshake{pid, go[1], ready[0]};
}

// Waits until the child says `ready` (false, the child reaped, if it ended first).
static bool await_ready(Handshake& h, const char* what) {
    bool ready = read_ready(h.ready);
    close(h.ready);
    if (!ready) {
        printf("FAILED: the %s child did not say `ready`\n", what);
        close(h.go);
        wait_for(h.pid, what);
    }
    return ready;
}

// Gives the child its go-ahead and waits for it to exit 0.
static void go_and_wait(Handshake& h, const char* what) {
    // A child that died meanwhile must fail the wait, not kill this process by SIGPIPE.
    void (*previous)(int) = signal(SIGPIPE, SIG_IGN);
    char byte = 'g';
    ssize_t wrote = write(h.go, &byte, 1);
    signal(SIGPIPE, previous);
    close(h.go);
    if (wrote != 1) printf("writing the go-ahead: %s\n", strerror(errno));
    wait_for(h.pid, what);
}
