module ticketing.invalid/client-python

go 1.26
