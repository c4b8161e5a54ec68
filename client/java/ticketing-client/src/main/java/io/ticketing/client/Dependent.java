package io.ticketing.client;

import java.util.concurrent.CompletableFuture;

/**
 * A stage derived from an {@link AcquireFuture}: cancelling it (or completing it exceptionally
 * from outside, as {@code orTimeout} does) cancels the acquire it derives from while that is
 * still pending. Once the acquire completed, the lease belongs to the caller's stages.
 */
final class Dependent<T> extends CompletableFuture<T> {
    private final CompletableFuture<Lease> root;

    Dependent(CompletableFuture<Lease> root) {
        this.root = root;
    }

    @Override
    public <U> CompletableFuture<U> newIncompleteFuture() {
        return new Dependent<>(root);
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        boolean ok = super.cancel(mayInterruptIfRunning);
        if (ok && !root.isDone()) {
            root.cancel(mayInterruptIfRunning);
        }
        return ok;
    }

    @Override
    public boolean completeExceptionally(Throwable ex) {
        boolean ok = super.completeExceptionally(ex);
        if (ok && !root.isDone()) {
            root.cancel(false);
        }
        return ok;
    }
}
