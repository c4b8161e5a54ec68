package io.ticketing.client;

import java.util.concurrent.CompletableFuture;

/**
 * The future of an acquire. Stages derived from it ({@code thenApply}, {@code thenCompose},
 * {@code whenComplete}, ... and stages derived from those) are {@link Dependent}s: cancelling
 * one of them, or completing it exceptionally from outside ({@code orTimeout}), while the
 * acquire is still pending withdraws the acquire like cancelling this future does (issue 34
 * item 9, R11).
 */
final class AcquireFuture extends CompletableFuture<Lease> {
    final AcquireOp op;
    private volatile boolean delivering;

    AcquireFuture(AcquireOp op) {
        this.op = op;
    }

    void deliver(Lease l, Throwable e) {
        delivering = true;
        if (e != null) {
            super.completeExceptionally(e);
        } else if (!complete(l)) {
            l.releaseInBackground(); // cancelled meanwhile
        }
    }

    @Override
    public <U> CompletableFuture<U> newIncompleteFuture() {
        return new Dependent<>(this);
    }

    /** From outside (orTimeout, a caller giving up): withdraws like cancel. */
    @Override
    public boolean completeExceptionally(Throwable ex) {
        if (delivering || isDone()) {
            return super.completeExceptionally(ex);
        }
        op.cancel();
        return super.completeExceptionally(ex);
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        if (isDone()) {
            return false;
        }
        if (!op.cancel()) {
            Lease l = op.result.getNow(null);
            if (l != null && !super.isDone()) {
                boolean ok = super.cancel(mayInterruptIfRunning);
                if (ok) {
                    l.releaseInBackground();
                }
                return ok;
            }
        }
        return super.cancel(mayInterruptIfRunning);
    }
}
